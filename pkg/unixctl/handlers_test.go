package unixctl

import (
	"maps"
	"testing"
)

func TestParseLookups(t *testing.T) {
	// dpctl/show of Open vSwitch 3.1.0 (a kernel datapath, then a userspace one).
	out := "system@ovs-system:\n  lookups: hit:5 missed:26 lost:7\n  flows: 0\n  masks: hit:10 total:0 hit/pkt:0.32\n" +
		"  cache: hit:2 hit-rate:6.45%\n  caches:\n    masks-cache: size:256\n  port 0: ovs-system (internal)\n" +
		"netdev@ovs-netdev:\n  lookups: hit:0 missed:3 lost:0\n  flows: 0\n  port 0: ovs-netdev (tap)\n"
	got, err := ParseLookups(out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Lookups{"system@ovs-system": {5, 26, 7}, "netdev@ovs-netdev": {0, 3, 0}}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := ParseLookups("system@ovs-system:\n  lookups: hit:x missed:1 lost:0\n"); err == nil {
		t.Error("a counter that is no number: no error")
	}
}

func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		before, after Lookups
		want          UpcallVerdict
	}{
		{Lookups{5, 26, 7}, Lookups{5, 28, 9}, AllLost},  // the reproduced state
		{Lookups{7, 27, 2}, Lookups{23, 28, 2}, Handled}, // a healthy restart
		{Lookups{7, 27, 2}, Lookups{9, 40, 10}, Handled}, // some lost (a full queue): handled
		{Lookups{7, 27, 2}, Lookups{90, 27, 2}, NoMiss},  // hits only
		{Lookups{7, 27, 9}, Lookups{0, 3, 3}, NoMiss},    // a new datapath
	} {
		if got := Verdict(tc.before, tc.after); got != tc.want {
			t.Errorf("Verdict(%v, %v) = %v, want %v", tc.before, tc.after, got, tc.want)
		}
	}
}
