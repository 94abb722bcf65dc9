package conflist

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"
)

func TestParseCIDRs(t *testing.T) {
	got, err := ParseCIDRs(" 198.51.100.0/26, 2001:db8:10:1::/64 ,")
	if err != nil || len(got) != 2 || got[0] != netip.MustParsePrefix("198.51.100.0/26") || got[1] != netip.MustParsePrefix("2001:db8:10:1::/64") {
		t.Errorf("ParseCIDRs: %v, %v", got, err)
	}
	for _, bad := range []string{"", ",", "198.51.100.1/26", "198.51.100.0/31", "2001:db8::/127", "nonsense", "198.51.100.0"} {
		if _, err := ParseCIDRs(bad); err == nil {
			t.Errorf("ParseCIDRs(%q): no error", bad)
		}
	}
}

func TestRender(t *testing.T) {
	tmpl := `{"cniVersion":"1.0.0","name":"n","x":1,"plugins":[
	  {"type":"ovs-bridge","bridge":"br0","ipam":{"type":"host-local","dataDir":"/d","subnet":"192.0.2.0/24",
	   "ranges":[[{"subnet":"192.0.2.0/24"}]],"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"},{"dst":"203.0.113.0/24"}]}},
	  {"type":"ovs-portmap","capabilities":{"portMappings":true}}]}`
	out, err := Render([]byte(tmpl), []netip.Prefix{netip.MustParsePrefix("2001:db8:10:1::/64")})
	if err != nil {
		t.Fatal(err)
	}
	var got, want any
	json.Unmarshal(out, &got)
	json.Unmarshal([]byte(`{"cniVersion":"1.0.0","name":"n","x":1,"plugins":[
	  {"type":"ovs-bridge","bridge":"br0","ipam":{"type":"host-local","dataDir":"/d",
	   "ranges":[[{"subnet":"2001:db8:10:1::/64","gateway":"2001:db8:10:1::1"}]],"routes":[{"dst":"::/0"}]}},
	  {"type":"ovs-portmap","capabilities":{"portMappings":true}}]}`), &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Render:\n got %s", out)
	}
	if _, err := Render([]byte(`{"plugins":[{"type":"ovs-bridge","ipam":{"type":"static"}}]}`), []netip.Prefix{netip.MustParsePrefix("2001:db8::/64")}); err == nil {
		t.Error("Render of a template without host-local: no error")
	}
	if _, err := Render([]byte(`{`), nil); err == nil {
		t.Error("Render of a broken template: no error")
	}
}

// TestRenderStatic: for a node without the agent, ovs-bridge's
// confirmedRanges goes (nobody would confirm the ranges); Render keeps it.
func TestRenderStatic(t *testing.T) {
	tmpl := []byte(`{"plugins":[{"type":"ovs-bridge","confirmedRanges":"/run/ovsflow/pod-ranges",
	  "ipam":{"type":"host-local","ranges":[[{"subnet":"192.0.2.0/24"}]]}},{"type":"ovs-portmap","confirmedRanges":"kept"}]}`)
	cidrs := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/26")}
	for _, tc := range []struct {
		name   string
		render func([]byte, []netip.Prefix) ([]byte, error)
		want   string
	}{
		{"Render", Render, "/run/ovsflow/pod-ranges"},
		{"RenderStatic", RenderStatic, ""},
	} {
		out, err := tc.render(tmpl, cidrs)
		if err != nil {
			t.Fatal(err)
		}
		var c struct{ Plugins []map[string]any }
		json.Unmarshal(out, &c)
		if got, _ := c.Plugins[0]["confirmedRanges"].(string); got != tc.want {
			t.Errorf("%s: ovs-bridge's confirmedRanges %q, want %q", tc.name, got, tc.want)
		}
		if c.Plugins[1]["confirmedRanges"] != "kept" {
			t.Errorf("%s: another plugin's key of that name changed: %s", tc.name, out)
		}
	}
}

// TestRenderBadRoutes: a routes section of the wrong shape is an error that
// names the field, not a panic.
func TestRenderBadRoutes(t *testing.T) {
	cidrs := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/26")}
	for _, tc := range []struct{ routes, want string }{
		{`["0.0.0.0/0"]`, `plugins[1].ipam.routes[0]: "0.0.0.0/0" is not an object`},
		{`[{"dst":"0.0.0.0/0"},null]`, `plugins[1].ipam.routes[1]: null is not an object`},
		{`[{"gw":"192.0.2.1"}]`, `plugins[1].ipam.routes[0].dst: missing`},
		{`[{"dst":5}]`, `plugins[1].ipam.routes[0].dst: 5 is not a string`},
		{`[{"dst":"default"}]`, `plugins[1].ipam.routes[0].dst: "default" is not a network prefix`},
		{`{"dst":"0.0.0.0/0"}`, `plugins[1].ipam.routes: {"dst":"0.0.0.0/0"} is not a list`},
	} {
		tmpl := `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"loopback"},
		  {"type":"ovs-bridge","ipam":{"type":"host-local","routes":` + tc.routes + `}}]}`
		_, err := Render([]byte(tmpl), cidrs)
		if err == nil || err.Error() != "template: "+tc.want {
			t.Errorf("routes %s: got error %v, want %q", tc.routes, err, "template: "+tc.want)
		}
	}
	// The single-plugin form names its ipam section alone.
	_, err := Render([]byte(`{"cniVersion":"1.0.0","name":"n","type":"ovs-bridge","ipam":{"type":"host-local","routes":[1]}}`), cidrs)
	if want := "template: ipam.routes[0]: 1 is not an object"; err == nil || err.Error() != want {
		t.Errorf("single plugin: got error %v, want %q", err, want)
	}
}

// RenderMTU gives every ovs-bridge entry the MTU, keeps a lower one of the
// template's, and touches nothing else; 0 is Render.
func TestRenderMTU(t *testing.T) {
	tmpl := []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[` +
		`{"type":"ovs-bridge","bridge":"br0","ipam":{"type":"host-local","ranges":[]}},` +
		`{"type":"ovs-bridge","bridge":"br1","mtu":1400},{"type":"ovs-portmap"}]}`)
	cidrs := []netip.Prefix{netip.MustParsePrefix("198.18.1.0/24")}
	out, err := RenderMTU(tmpl, cidrs, 1450)
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(out, &conf); err != nil {
		t.Fatal(err)
	}
	for i, want := range []any{float64(1450), float64(1400), nil} {
		if got := conf.Plugins[i]["mtu"]; got != want {
			t.Errorf("plugins[%d].mtu: got %v, want %v", i, got, want)
		}
	}
	plain, err := Render(tmpl, cidrs)
	if err != nil {
		t.Fatal(err)
	}
	if same, err := RenderMTU(tmpl, cidrs, 0); err != nil || string(same) != string(plain) {
		t.Errorf("RenderMTU(0): %v\n%s\nwant Render's\n%s", err, same, plain)
	}
}
