package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// tracker follows the workload's pods on a watch and notes when each one
// reaches each milestone, in seconds from the last reset.
type tracker struct {
	mu      sync.Mutex
	t0      time.Time
	pod     map[types.UID]*tracked
	changed chan struct{}
	cancel  context.CancelFunc
}

type tracked struct {
	p     *corev1.Pod
	gone  bool
	marks map[string]float64
}

type trackerState struct{ live, ready int }

func startTracker(ctx context.Context, kube kubernetes.Interface, ns string) (*tracker, error) {
	t := &tracker{t0: time.Now(), pod: map[types.UID]*tracked{}, changed: make(chan struct{}, 1)}
	ctx, t.cancel = context.WithCancel(ctx)
	f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = appLabel }))
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.update(obj) },
		UpdateFunc: func(_, obj any) { t.update(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			t.remove(obj)
		},
	})
	if err != nil {
		t.cancel()
		return nil, fmt.Errorf("watching pods: %w", err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.cancel()
		return nil, fmt.Errorf("watching pods in %s: the cache did not sync", ns)
	}
	return t, nil
}

func (t *tracker) stop() { t.cancel() }

func (t *tracker) notify() {
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

func (t *tracker) mark(e *tracked, name string, now time.Time) {
	if _, ok := e.marks[name]; !ok {
		e.marks[name] = now.Sub(t.t0).Seconds()
	}
}

// with runs f, under t's lock, on the pod obj is (other objects are
// ignored) and its entry, made at first sight (isNew), then wakes waiters.
func (t *tracker) with(obj any, f func(p *corev1.Pod, e *tracked, isNew bool, now time.Time)) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.pod[p.UID]
	isNew := e == nil
	if isNew {
		e = &tracked{p: p, marks: map[string]float64{}}
		t.pod[p.UID] = e
	}
	f(p, e, isNew, now)
	t.notify()
}

func (t *tracker) update(obj any) {
	t.with(obj, func(p *corev1.Pod, e *tracked, isNew bool, now time.Time) {
		if isNew {
			t.mark(e, "created", now)
		}
		e.p = p
		if p.Spec.NodeName != "" {
			t.mark(e, "scheduled", now)
		}
		if condTrue(p, corev1.PodReadyToStartContainers) {
			t.mark(e, "sandbox ready", now)
		}
		if p.DeletionTimestamp == nil && condTrue(p, corev1.PodReady) {
			t.mark(e, "Ready", now)
		}
		if p.DeletionTimestamp != nil {
			t.mark(e, "terminating", now)
		}
	})
}

func (t *tracker) remove(obj any) {
	t.with(obj, func(_ *corev1.Pod, e *tracked, _ bool, now time.Time) {
		e.gone = true
		t.mark(e, "gone", now)
	})
}

func condTrue(p *corev1.Pod, c corev1.PodConditionType) bool {
	for _, pc := range p.Status.Conditions {
		if pc.Type == c {
			return pc.Status == corev1.ConditionTrue
		}
	}
	return false
}

// reset starts the clock again; the milestones seen so far are forgotten.
func (t *tracker) reset(t0 time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.t0 = t0
	for uid, e := range t.pod {
		if e.gone {
			delete(t.pod, uid)
			continue
		}
		e.marks = map[string]float64{}
	}
}

func (t *tracker) state() trackerState {
	t.mu.Lock()
	defer t.mu.Unlock()
	var s trackerState
	for _, e := range t.pod {
		if e.gone {
			continue
		}
		s.live++
		if e.p.DeletionTimestamp == nil && condTrue(e.p, corev1.PodReady) {
			s.ready++
		}
	}
	return s
}

// pods: the live pods, as last seen.
func (t *tracker) pods() []*corev1.Pod {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*corev1.Pod
	for _, e := range t.pod {
		if !e.gone {
			out = append(out, e.p)
		}
	}
	slices.SortFunc(out, func(x, y *corev1.Pod) int {
		if x.Name < y.Name {
			return -1
		}
		if x.Name > y.Name {
			return 1
		}
		return 0
	})
	return out
}

// waitFor returns when done holds, or after timeout.
func (t *tracker) waitFor(ctx context.Context, timeout time.Duration, done func(trackerState) bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		s := t.state()
		if done(s) {
			return nil
		}
		select {
		case <-t.changed:
		case <-tick.C:
			logf("  %d pods, %d Ready", s.live, s.ready)
		case <-deadline.C:
			return fmt.Errorf("not done after %s", timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// timing: the phase's figures from the milestones noted since the reset.
func (t *tracker) timing(pods int, requests, all time.Duration, milestones ...string) Timing {
	t.mu.Lock()
	defer t.mu.Unlock()
	tm := Timing{Pods: pods, Requests: requests.Seconds(), All: all.Seconds(), Milestones: map[string]Quantiles{}}
	for _, m := range milestones {
		var v []float64
		for _, e := range t.pod {
			if s, ok := e.marks[m]; ok {
				v = append(v, s)
			}
		}
		tm.Milestones[m] = quantiles(v)
	}
	return tm
}

func quantiles(v []float64) Quantiles {
	if len(v) == 0 {
		return Quantiles{}
	}
	slices.Sort(v)
	at := func(q float64) float64 { return v[int(q*float64(len(v)-1)+0.5)] }
	return Quantiles{N: len(v), Min: v[0], P50: at(0.5), P90: at(0.9), Max: v[len(v)-1]}
}
