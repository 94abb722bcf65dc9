package flows

import (
	"fmt"
	"strings"
	"testing"
)

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

// With a new-connection rate, the request classifiers only look up; table
// 39 meters and commits what is new, per mapping, and passes the rest on.
func TestConnRateFlows(t *testing.T) {
	a := sample(t)
	a.ConnRate, a.ConnBurst = 20, 10
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	p := DefaultPipeline()
	var got []string
	for _, f := range p.AttachmentFlows(a) {
		if s := f.String(); strings.Contains(s, "table=39") || strings.Contains(s, "priority=200,") || strings.Contains(s, "priority=201,") {
			got = append(got, s)
		}
	}
	plain := a
	plain.ConnRate = 0
	if n := len(p.AttachmentFlows(a)) - len(p.AttachmentFlows(plain)); n <= 0 {
		t.Errorf("rate adds %d flows", n)
	}
	for _, f := range p.AttachmentFlows(plain) {
		if strings.Contains(f.String(), "table=39") || strings.Contains(f.String(), "meter:") {
			t.Errorf("without a rate: %s", f)
		}
	}
	ms := ConnMeters(a)
	if len(ms) == 0 {
		t.Fatal("no meters")
	}
	for i, m := range ms {
		if m.ID != ConnMeterOf(a.OFPort, i) || !m.Pkts || m.RateKbps != 20 || m.BurstKb != 10 {
			t.Errorf("meter %d: %s", i, m)
		}
	}
	joined := strings.Join(got, "\n")
	for _, want := range []string{
		"priority=200,", "actions=ct(zone=64000,nat,table=39)",
		"actions=ct(zone=64002,nat,table=39)",
		"table=39,priority=100,", "ct_state=+trk+new", fmt.Sprintf("actions=meter:%d,ct(commit,zone=64000,", ConnMeterOf(a.OFPort, 0)),
		fmt.Sprintf("actions=meter:%d,ct(commit,zone=64002,", ConnMeterOf(a.OFPort, 0)),
		fmt.Sprintf("actions=meter:%d,ct(commit,zone=64000,nat(dst=192.0.2.10:53)", ConnMeterOf(a.OFPort, 1)),
		"table=39,priority=50,", "ct_state=+trk-new-inv", "actions=goto_table:40",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("flows do not say %q:\n%s", want, joined)
		}
	}
	for _, f := range p.AttachmentFlows(a) {
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
	}
}
