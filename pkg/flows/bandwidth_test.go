package flows

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

func TestBandwidthFlows(t *testing.T) {
	c := AttachmentCookie("ctr", "eth0")
	b := Bandwidth{Cookie: c, OFPort: 7, RateKbps: 20000, BurstKb: 10000}
	bc := c.WithKind(CookieKindBandwidth).String()
	want := "delete cookie=" + bc + "/-1\n" +
		"add cookie=" + bc + ",table=0,priority=430,in_port=7,reg1=0/0x4,actions=meter:535822343,load:1->NXM_NX_REG1[2],resubmit(,0)\n"
	if got := BandwidthBundle(b).String(); got != want {
		t.Errorf("BandwidthBundle: got\n%s\nwant\n%s", got, want)
	}
	if got, want := b.Meter().String(), "meter=535822343,kbps,burst,band=type=drop,rate=20000,burst_size=10000"; got != want {
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

// Every meter of the suite is in its range and no other is: the egress
// and new-connection meters of any two ofports never meet, and an egress
// meter names its ofport.
func TestSuiteMeters(t *testing.T) {
	for _, id := range []uint32{0, 1, 7, 0xfeff, 0xffff, MeterSuiteFirst - 1, MeterSuiteLast + 1, 0xffff0000} {
		if IsSuiteMeter(id) {
			t.Errorf("IsSuiteMeter(%#x): got true, want false (another's meter)", id)
		}
		if _, ok := EgressMeterPort(id); ok {
			t.Errorf("EgressMeterPort(%#x): got ok, want not an egress meter", id)
		}
	}
	for _, ofport := range []uint32{1, 7, 32768, 0xfeff} {
		e := MeterOf(ofport)
		if !IsSuiteMeter(e) || e > openflow.MeterMax {
			t.Errorf("MeterOf(%d) = %#x: not in the suite's range", ofport, e)
		}
		if got, ok := EgressMeterPort(e); !ok || got != ofport {
			t.Errorf("EgressMeterPort(MeterOf(%d)): got %d, %v", ofport, got, ok)
		}
		for _, i := range []int{0, MaxConnMeters - 1} {
			c := ConnMeterOf(ofport, i)
			if !IsSuiteMeter(c) || c >= MeterOf(1) {
				t.Errorf("ConnMeterOf(%d, %d) = %#x: want in the suite's range below every egress meter", ofport, i, c)
			}
			if _, ok := EgressMeterPort(c); ok {
				t.Errorf("EgressMeterPort(ConnMeterOf(%d, %d)): got ok", ofport, i)
			}
		}
	}
}
