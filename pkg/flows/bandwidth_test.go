package flows

import "testing"

func TestBandwidthFlows(t *testing.T) {
	c := AttachmentCookie("ctr", "eth0")
	b := Bandwidth{Cookie: c, OFPort: 7, RateKbps: 20000, BurstKb: 10000}
	bc := c.WithKind(CookieKindBandwidth).String()
	want := "delete cookie=" + bc + "/-1\n" +
		"add cookie=" + bc + ",table=0,priority=430,in_port=7,reg1=0/0x4,actions=meter:7,load:1->NXM_NX_REG1[2],resubmit(,0)\n"
	if got := BandwidthBundle(b).String(); got != want {
		t.Errorf("BandwidthBundle: got\n%s\nwant\n%s", got, want)
	}
	if got, want := b.Meter().String(), "meter=7,kbps,burst,band=type=drop,rate=20000,burst_size=10000"; got != want {
		t.Errorf("Meter: got %s, want %s", got, want)
	}
	for _, f := range BandwidthFlows(b) {
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
	}
}
