package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// The trace pass answers "how many bridge reconfigurations does one ADD
// wait for, and which": with ovs-vswitchd quiet first (its counter still for
// half a second), it runs one ADD and one DEL of a chain that touches Open
// vSwitch (A or F) and records, on one clock:
//   - ovs-vswitchd's bridge_reconfigure counter, polled over unixctl 2 ms
//     after each answer; its main loop answers between two iterations, so a
//     reply that is late tells that the loop was busy (a reconfiguration
//     that long, or OpenFlow or OVSDB work), and a new value tells that the
//     iteration that ran a reconfiguration just ended;
//   - the link events of the node netns (rtnetlink): created, up, carrier,
//     promiscuous, alias, deleted;
//   - the Interface rows as ovsdb-server publishes them (monitor): the
//     insert, and the ofport ovs-vswitchd writes at the end of the
//     reconfiguration that added the port;
//   - each plugin process libcni ran, start and end.
// Then it waits until ovs-vswitchd is quiet again, and counts the
// reconfigurations that came after the return (caused by the operation but
// not waited for). The polling wakes ovs-vswitchd's main loop up to 500
// times a second, so the trace pass is not used for any latency figure.

type traceEvent struct {
	at   time.Time
	rel  time.Duration // since the operation started
	what string
}

type traceResult struct {
	chain, op     string
	n             int
	wall          time.Duration
	during, after int
	events        []traceEvent
}

type tracer struct {
	mu     sync.Mutex
	events []traceEvent
}

func (t *tracer) add(what string) {
	now := time.Now()
	t.mu.Lock()
	t.events = append(t.events, traceEvent{at: now, what: what})
	t.mu.Unlock()
}

// unixctl is a persistent JSON-RPC connection to ovs-vswitchd's control socket.
type unixctl struct {
	c   net.Conn
	dec *json.Decoder
	id  int
}

func dialUnixctl(sock string) (*unixctl, error) {
	c, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("unixctl %s: %w", sock, err)
	}
	return &unixctl{c: c, dec: json.NewDecoder(c)}, nil
}

func (u *unixctl) counter() (int, error) {
	u.id++
	req, _ := json.Marshal(map[string]any{"id": u.id, "method": "coverage/read-counter", "params": []string{"bridge_reconfigure"}})
	u.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := u.c.Write(req); err != nil {
		return 0, err
	}
	var resp struct {
		Result *string `json:"result"`
	}
	if err := u.dec.Decode(&resp); err != nil {
		return 0, err
	}
	if resp.Result == nil {
		return 0, fmt.Errorf("coverage/read-counter: no result")
	}
	var n int
	_, err := fmt.Sscan(*resp.Result, &n)
	return n, err
}

// waitQuiet waits until the counter has not moved for 500 ms (at most 10 s)
// and returns it.
func (u *unixctl) waitQuiet() (int, error) {
	last, err := u.counter()
	if err != nil {
		return 0, err
	}
	still := time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		v, err := u.counter()
		if err != nil {
			return 0, err
		}
		if v != last {
			last, still = v, time.Now()
		} else if time.Since(still) >= 500*time.Millisecond {
			break
		}
	}
	return last, nil
}

// ovsdbMonitor streams the Interface table's name and ofport columns.
func ovsdbMonitor(ep string, tr *tracer) (func(), error) {
	c, err := net.DialTimeout("unix", strings.TrimPrefix(ep, "unix:"), 2*time.Second)
	if err != nil {
		return nil, err
	}
	req, _ := json.Marshal(map[string]any{"id": 1, "method": "monitor", "params": []any{"Open_vSwitch", nil,
		map[string]any{"Interface": map[string]any{"columns": []string{"name", "ofport"}}}}})
	if _, err := c.Write(req); err != nil {
		c.Close()
		return nil, err
	}
	dec := json.NewDecoder(c)
	var first struct{ Result json.RawMessage }
	if err := dec.Decode(&first); err != nil {
		c.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			var msg struct {
				Method string            `json:"method"`
				Params []json.RawMessage `json:"params"`
				ID     any               `json:"id"`
			}
			if dec.Decode(&msg) != nil {
				return
			}
			if msg.Method == "echo" {
				b, _ := json.Marshal(map[string]any{"id": msg.ID, "result": msg.Params, "error": nil})
				c.Write(b)
				continue
			}
			if msg.Method != "update" || len(msg.Params) < 2 {
				continue
			}
			var upd map[string]map[string]struct {
				Old map[string]any `json:"old"`
				New map[string]any `json:"new"`
			}
			if json.Unmarshal(msg.Params[1], &upd) != nil {
				continue
			}
			for _, row := range upd["Interface"] {
				switch {
				case row.Old == nil && row.New != nil:
					tr.add(fmt.Sprintf("OVSDB: Interface %v inserted", row.New["name"]))
				case row.New == nil:
					tr.add(fmt.Sprintf("OVSDB: Interface %v deleted", row.Old["name"]))
				case row.Old["ofport"] != nil:
					tr.add(fmt.Sprintf("OVSDB: Interface %v ofport = %v (ovs-vswitchd applied the insert)", row.New["name"], ofportString(row.New["ofport"])))
				}
			}
		}
	}()
	return func() { c.Close(); <-done }, nil
}

func ofportString(v any) string {
	if f, ok := v.(float64); ok {
		return fmt.Sprintf("%.0f", f)
	}
	return "(none)"
}

// linkMonitor records what changes on the links of the netns the calling
// thread is in (the subscription socket is made there); label names it.
func linkMonitor(tr *tracer, label string) (func(), error) {
	ch := make(chan netlink.LinkUpdate, 256)
	done := make(chan struct{})
	if err := netlink.LinkSubscribeWithOptions(ch, done, netlink.LinkSubscribeOptions{}); err != nil {
		return nil, err
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		type state struct {
			up, carrier, promisc bool
			alias                string
		}
		seen := map[string]state{}
		for u := range ch {
			a := u.Attrs()
			if a == nil {
				continue
			}
			name := a.Name
			if u.Header.Type == 17 { // RTM_DELLINK
				tr.add(label + " link " + name + " deleted")
				delete(seen, name)
				continue
			}
			s := state{up: a.RawFlags&1 != 0, carrier: a.OperState == netlink.OperUp, promisc: a.Promisc != 0, alias: a.Alias}
			old, ok := seen[name]
			seen[name] = s
			var what []string
			switch {
			case !ok:
				what = append(what, fmt.Sprintf("seen (up %v, carrier %v, promisc %v)", s.up, s.carrier, s.promisc))
			default:
				if s.up != old.up {
					what = append(what, fmt.Sprintf("up %v", s.up))
				}
				if s.carrier != old.carrier {
					what = append(what, fmt.Sprintf("carrier %v", s.carrier))
				}
				if s.promisc != old.promisc {
					what = append(what, fmt.Sprintf("promiscuous %v", s.promisc))
				}
				if s.alias != old.alias {
					what = append(what, "alias set")
				}
				if len(what) == 0 {
					what = append(what, "changed (other attributes)")
				}
			}
			tr.add(label + " link " + name + ": " + strings.Join(what, ", "))
		}
	}()
	return func() { close(done); <-finished }, nil
}

// traceOne traces one ADD (then one DEL) of ch.
func traceOne(ctx context.Context, ch *chain, reconf *reconfCounter, ep string, ex *timedExec, n int) ([]*traceResult, error) {
	u, err := dialUnixctl(reconf.sock)
	if err != nil {
		return nil, err
	}
	defer u.c.Close()
	poll, err := dialUnixctl(reconf.sock)
	if err != nil {
		return nil, err
	}
	defer poll.c.Close()
	var out []*traceResult
	var c *container
	for _, op := range []string{"ADD", "DEL"} {
		tr := &tracer{}
		stopMon, err := ovsdbMonitor(ep, tr)
		if err != nil {
			return out, fmt.Errorf("ovsdb monitor: %w", err)
		}
		stopNode, err := linkMonitor(tr, "node:")
		if err != nil {
			stopMon()
			return out, fmt.Errorf("link monitor: %w", err)
		}
		// ovs-vswitchd hears of the container's links too (its netlink
		// sockets listen to all the netns that have an id here).
		var stopCont func()
		err = ch.probe.Do(func(ns.NetNS) error {
			var err error
			stopCont, err = linkMonitor(tr, "container:")
			return err
		})
		if err != nil {
			stopMon()
			stopNode()
			return out, fmt.Errorf("link monitor: %w", err)
		}
		stopLinks := func() { stopNode(); stopCont() }
		base, err := u.waitQuiet()
		if err != nil {
			stopMon()
			stopLinks()
			return out, err
		}
		// The monitors report their start-up noise (none expected once
		// quiet); forget it.
		tr.mu.Lock()
		tr.events = nil
		tr.mu.Unlock()
		stop := make(chan struct{})
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			last := base
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				v, err := poll.counter()
				if err != nil {
					return
				}
				if late := time.Since(t0); v != last {
					tr.add(fmt.Sprintf("**reconfiguration %d ended** (counter +%d; the poll answered after %.1f ms)", v-base, v-last, float64(late.Microseconds())/1000))
					last = v
				} else if late > 3*time.Millisecond {
					tr.add(fmt.Sprintf("ovs-vswitchd main loop busy: the poll answered after %.1f ms", float64(late.Microseconds())/1000))
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
		time.Sleep(20 * time.Millisecond)
		ex.setTag("trace", n)
		ncalls := len(ex.all())
		start := time.Now()
		var d time.Duration
		if op == "ADD" {
			c, d, err = ch.measureAdd(ctx, 9000+n)
		} else {
			d, err = ch.del(ctx, c, probePort)
		}
		end := time.Now()
		time.Sleep(20 * time.Millisecond)
		close(stop)
		<-polled
		final, qerr := u.waitQuiet()
		stopLinks()
		stopMon()
		if err != nil {
			return out, fmt.Errorf("trace %s %s: %w", ch.key, op, err)
		}
		if qerr != nil {
			return out, qerr
		}
		evs := []traceEvent{{at: start, what: "libcni " + op + " of chain " + ch.key + " starts"}, {at: end, what: "libcni " + op + " returns"}}
		for _, cl := range ex.all()[ncalls:] {
			evs = append(evs, traceEvent{at: cl.start, what: cl.plugin + " " + cl.command + " starts"},
				traceEvent{at: cl.start.Add(cl.wall), what: fmt.Sprintf("%s %s returns (%.1f ms)", cl.plugin, cl.command, float64(cl.wall.Microseconds())/1000)})
		}
		tr.mu.Lock()
		// Only what falls in the operation's window, and a short tail.
		for _, e := range tr.events {
			if !e.at.Before(start) && !e.at.After(end.Add(20*time.Millisecond)) {
				evs = append(evs, e)
			}
		}
		tr.mu.Unlock()
		slices.SortStableFunc(evs, func(a, b traceEvent) int { return a.at.Compare(b.at) })
		for i := range evs {
			evs[i].rel = evs[i].at.Sub(start)
		}
		// during: reconfigurations that ended before the return (and the
		// one the 20 ms tail shows ending); after: the rest, until quiet.
		during := 0
		for _, e := range evs {
			if strings.HasPrefix(e.what, "**reconfiguration") && !e.at.After(end) {
				during++
			}
		}
		out = append(out, &traceResult{chain: ch.key, op: op, n: n, wall: d, during: during, after: final - base - during, events: evs})
	}
	return out, nil
}
