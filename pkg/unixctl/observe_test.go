package unixctl

import (
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
