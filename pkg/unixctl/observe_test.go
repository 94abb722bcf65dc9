package unixctl

import (
	"net"
	"slices"
	"testing"
)

func TestParseZoneCounts(t *testing.T) {
	// As OVS 3.1's dpctl/ct-get-limits prints it.
	out := "default limit=0\nzone=64000,limit=65536,count=3\nzone=64001,limit=0,count=0\nzone=64002,limit=16384,count=17\n"
	got, err := ParseZoneCounts(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []ZoneCount{{64000, 3, 65536}, {64001, 0, 0}, {64002, 17, 16384}}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"zone=70000,limit=1,count=0", "zone=1,limit=x,count=0"} {
		if _, err := ParseZoneCounts(bad); err == nil {
			t.Errorf("%q: got no error", bad)
		}
	}
}

func TestParseLearnedPort(t *testing.T) {
	// As OVS 3.1's fdb/show prints it.
	out := " port  VLAN  MAC                Age\n" +
		"LOCAL     0  9e:e9:f1:8a:39:44    2\n" +
		"47859     0  7a:36:80:f4:d5:c1    1\n" +
		"    1    10  9e:e9:f1:8a:39:44  static\n"
	mac, _ := net.ParseMAC("9E:E9:F1:8A:39:44")
	for _, tc := range []struct {
		vlan uint16
		want string
	}{{0, "LOCAL"}, {10, "1"}, {20, ""}} {
		if got := ParseLearnedPort(out, mac, tc.vlan); got != tc.want {
			t.Errorf("VLAN %d: got %q, want %q", tc.vlan, got, tc.want)
		}
	}
}
