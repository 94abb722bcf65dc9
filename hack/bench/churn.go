package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

// DEL under churn: a real node deletes pods while others start. For each
// chain, `churners` callers keep ADDing new containers while this goroutine
// DELs existing ones, one at a time, and times each DEL. The chains take
// turns in rounds (the order rotates), so that machine noise hits them
// alike; each chain's churn runs alone, so that a chain only competes with
// its own ADDs. The victims are the oldest containers attached, those of
// the fill first, then those the churn added in earlier rounds.
type churnResult struct {
	churners int
	del      map[string][]time.Duration
	adds     map[string]int           // churn ADDs completed while DELs were measured
	busy     map[string]time.Duration // wall time of those rounds
	minN     map[string]int           // containers attached when a measured DEL started, min and max
	maxN     map[string]int
	// ovs-vswitchd's answer to one OpenFlow request on chain A's bridge (a
	// delete of an unused cookie and its barrier: what each of our DELs
	// sends, twice), timed every 20 ms for as long as a round of chain A's
	// churn lasts, and as long again with the node quiet before it.
	ofQuiet, ofChurn []time.Duration
}

func runChurn(ctx context.Context, chains []*chain, base, rounds, perRound, churners, callers int, ex *timedExec, ofTarget string) (*churnResult, error) {
	res := &churnResult{churners: churners, del: map[string][]time.Duration{}, adds: map[string]int{},
		busy: map[string]time.Duration{}, minN: map[string]int{}, maxN: map[string]int{}}
	for _, ch := range chains {
		ex.setTag("fill", len(ch.attached))
		if _, err := ch.parallel(ctx, base, callers); err != nil {
			return res, err
		}
	}
	for r := 0; r < rounds; r++ {
		order := append(append([]*chain(nil), chains[r%len(chains):]...), chains[:r%len(chains)]...)
		for _, ch := range order {
			var probe <-chan []time.Duration
			stop := make(chan struct{})
			if ch.key == "A" && ofTarget != "" {
				quiet := make(chan struct{})
				before := ofProbe(ctx, endpoint.MustParse(ofTarget), quiet)
				time.Sleep(time.Second)
				close(quiet)
				res.ofQuiet = append(res.ofQuiet, <-before...)
				probe = ofProbe(ctx, endpoint.MustParse(ofTarget), stop)
			}
			err := res.round(ctx, ch, perRound, churners, ex)
			close(stop)
			if probe != nil {
				res.ofChurn = append(res.ofChurn, <-probe...)
			}
			if err != nil {
				return res, err
			}
		}
	}
	for _, ch := range chains {
		ex.setTag("fill", len(ch.attached))
		if _, err := ch.parallel(ctx, 0, callers); err != nil {
			return res, err
		}
	}
	return res, nil
}

func (res *churnResult) round(ctx context.Context, ch *chain, dels, churners int, ex *timedExec) error {
	ex.setTag("churn", len(ch.attached))
	var (
		stop  atomic.Bool
		wg    sync.WaitGroup
		adds  atomic.Int64
		first error
		once  sync.Once
	)
	start := time.Now()
	for w := 0; w < churners; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				c, err := ch.newContainer()
				if err != nil {
					once.Do(func() { first = err })
					return
				}
				if !ch.addOrUndo(ctx, c) {
					c.ns.Close()
					continue
				}
				ch.mu.Lock()
				ch.attached = append(ch.attached, c)
				ch.mu.Unlock()
				if !stop.Load() {
					adds.Add(1)
				}
			}
		}()
	}
	for i := 0; i < dels; i++ {
		ch.mu.Lock()
		if len(ch.attached) == 0 {
			ch.mu.Unlock()
			break
		}
		victim := ch.attached[0]
		ch.attached = ch.attached[1:]
		n := len(ch.attached) + 1
		ch.mu.Unlock()
		if m, ok := res.minN[ch.key]; !ok || n < m {
			res.minN[ch.key] = n
		}
		res.maxN[ch.key] = max(res.maxN[ch.key], n)
		d, err := ch.del(ctx, victim, victim.hostPort)
		victim.ns.Close()
		if err != nil {
			failed.record(err)
			continue
		}
		res.del[ch.key] = append(res.del[ch.key], d)
	}
	stop.Store(true)
	res.busy[ch.key] += time.Since(start)
	res.adds[ch.key] += int(adds.Load())
	wg.Wait()
	return first
}

// ofProbe times one OpenFlow request on target every 20 ms until stop is
// closed, and sends what it measured.
func ofProbe(ctx context.Context, target endpoint.Endpoint, stop <-chan struct{}) <-chan []time.Duration {
	out := make(chan []time.Duration, 1)
	go func() {
		var ds []time.Duration
		for {
			select {
			case <-stop:
				out <- ds
				return
			case <-time.After(20 * time.Millisecond):
			}
			t0 := time.Now()
			if err := openflow.DeleteFlows(ctx, target, openflow.Delete{Cookie: 0x7e57, Mask: ^uint64(0)}); err == nil {
				ds = append(ds, time.Since(t0))
			}
		}
	}()
	return out
}
