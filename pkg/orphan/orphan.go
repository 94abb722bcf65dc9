// Package orphan replays the DEL of an attachment whose sandbox is gone
// while the runtime never ran its DEL (a runtime without CNI GC, such as
// containerd 2.4, loses such a DEL for good: the attachment keeps its port,
// flows, host ports and address, and the pod's next sandbox on the node is
// refused its host ports).
//
// An attachment is orphaned when its sandbox is known to be gone: its port
// row (pkg/ovsdb's records) names a host interface that the node's kernel
// no longer has (the host end of a veth goes with the sandbox's netns) and
// the network namespace recorded at ADD (its path and inode) no longer
// exists or is another one (pkg/netns), while no ADD or DEL of it is in
// flight (pkg/ovsdb's claims and deleting marks), seen so by two passes at
// least Interval apart. A missing veth alone is not enough: a container with
// CAP_NET_ADMIN that deletes its own eth0 deletes the host end too, and a
// DEL then would give its address to the next pod while it runs. A netns
// path this process cannot see (its directory is not mounted here, or a
// /proc/PID path of a process in another PID namespace) is not known to be
// gone: such an attachment is kept, and said so once. For each, the Sweeper executes the node's conflist's
// DEL for exactly that attachment, as the runtime would have: the plugins
// remove the port, flows, host ports and host-local's allocation
// themselves. A plugin of the chain that is not ours and fails its DEL
// (many cannot without a netns, or are not in the agent's bin dir) is
// reported (logged once, counted) and ours go on; a DEL of ours that fails
// is tried again, after a wait that doubles with each failure. It is a DEL
// and not a GC with a list of valid attachments:
// host-local's GC releases every address not on the list, the one of an
// ADD in flight too.
package orphan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/netns"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

// DefaultInterval is the time between passes, and how long a host
// interface must have been seen missing before its attachment's DEL.
const DefaultInterval = 30 * time.Second

// delTimeout bounds the replayed DEL of one plugin of the chain: ours
// end their own first (cnicmd.MaxDelTimeout), with code 11 when OVS did not
// answer in time; a foreign one is killed, as a runtime would.
const delTimeout = cnicmd.MaxDelTimeout + 30*time.Second

// Config is what a Sweeper works on.
type Config struct {
	OVSDB    endpoint.Endpoint // the node's OVSDB
	Conflist string            // path of the node's conflist: its DEL is replayed
	CNIPath  []string          // the node's plugin dirs (CNI_PATH)
	CacheDir string            // libcni's cache dir ("": one under os.TempDir; DEL only removes from it)
	Interval time.Duration     // between passes and between the two sightings (0: none)
	Log      io.Writer
	// Deleted, when set, hears of each replayed DEL (the metrics).
	Deleted func(a ovsdb.Attachment, err error)
	// PluginFailed, when set, hears of each failed DEL of a plugin of the
	// chain that is not ours, by its type (the metrics).
	PluginFailed func(plugin string)
}

// Sweeper remembers, between passes, since when each attachment has been
// seen orphaned.
type Sweeper struct {
	cfg  Config
	seen map[ovsdb.Attachment]time.Time
	// linkExists is the node's kernel, by interface name.
	linkExists func(name string) (bool, error)
	// kept are the attachments whose veth is missing while their netns is
	// not known to be gone, with why: each is logged once.
	kept map[ovsdb.Attachment]string
	// failed are the attachments whose DEL failed: how often, and when
	// the next try is due.
	failed map[ovsdb.Attachment]failure
	// reported are the foreign plugins' failures already logged.
	reported map[reported]bool
}

type failure struct {
	n    int
	next time.Time
}

type reported struct {
	a      ovsdb.Attachment
	plugin string
}

// maxBackoff bounds the wait between two tries of a failing DEL.
const maxBackoff = 30 * time.Minute

// backoff is the wait after the nth failure of a DEL: Interval, doubled
// with each failure, at most maxBackoff.
func backoff(interval time.Duration, n int) time.Duration {
	d := interval
	for i := 1; i < n && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// due says whether a's DEL may be tried now.
func (s *Sweeper) due(a ovsdb.Attachment, now time.Time) bool {
	f, ok := s.failed[a]
	return !ok || !now.Before(f.next)
}

// forget drops what the Sweeper knows of a.
func (s *Sweeper) forget(a ovsdb.Attachment) {
	delete(s.seen, a)
	delete(s.failed, a)
	for k := range s.reported {
		if k.a == a {
			delete(s.reported, k)
		}
	}
}

// New returns a Sweeper that has seen nothing yet.
func New(cfg Config) *Sweeper {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	return &Sweeper{cfg: cfg, seen: map[ovsdb.Attachment]time.Time{}, linkExists: linkExists,
		kept: map[ovsdb.Attachment]string{}, failed: map[ovsdb.Attachment]failure{}, reported: map[reported]bool{}}
}

func linkExists(name string) (bool, error) {
	_, err := netlinksafe.LinkByName(name)
	var nf netlink.LinkNotFoundError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &nf):
		return false, nil
	}
	return false, fmt.Errorf("looking up host interface %q: %w", name, err)
}

// Result is what one pass found and did.
type Result struct {
	Suspects []ovsdb.Attachment // seen orphaned for the first time, or not yet for Interval
	Deleted  []ovsdb.Attachment // DEL replayed and successful
	Failed   []ovsdb.Attachment // DEL replayed and one of ours failed (tried again, later each time)
	Backoff  []ovsdb.Attachment // DEL failed before and not due yet
	// Foreign are the DELs of other plugins of the chain that failed
	// while ours went on (their attachment is in Deleted or Failed).
	Foreign []PluginFailure
	// Kept have no host interface but a netns not known to be gone (the
	// container deleted its own interface, or the path is not visible).
	Kept []ovsdb.Attachment
}

// Run runs a pass every Interval until ctx is done.
func (s *Sweeper) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := s.Pass(ctx); err != nil && ctx.Err() == nil {
			s.logf("pass: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass is one sweep: it notes the attachments orphaned now, and replays
// the DEL of those also seen orphaned by a pass at least Interval ago.
func (s *Sweeper) Pass(ctx context.Context) (Result, error) {
	var res Result
	list, err := libcni.ConfListFromFile(s.cfg.Conflist)
	if err != nil {
		return res, fmt.Errorf("the node's conflist: %w", err)
	}
	orphans, kept, err := s.orphans(ctx, list.Name)
	if err != nil {
		return res, err
	}
	for a := range s.kept {
		if _, ok := kept[a]; !ok {
			delete(s.kept, a)
		}
	}
	for _, a := range slices.SortedFunc(maps.Keys(kept), cmpAttachment) {
		if _, ok := s.kept[a]; !ok {
			s.logf("%s kept: its host interface is missing but %s", a, kept[a])
		}
		s.kept[a] = kept[a]
		res.Kept = append(res.Kept, a)
	}
	now := time.Now()
	for a := range s.seen {
		if _, ok := orphans[a]; !ok {
			s.forget(a) // back, gone, or in flight: start again
		}
	}
	for _, a := range slices.SortedFunc(maps.Keys(orphans), cmpAttachment) {
		first, ok := s.seen[a]
		if !ok {
			s.seen[a] = now
		}
		// A tenth of slack: Run's ticker makes two passes one Interval
		// apart, give or take its jitter.
		if !ok || now.Sub(first) < s.cfg.Interval-s.cfg.Interval/10 {
			res.Suspects = append(res.Suspects, a)
			continue
		}
		if !s.due(a, now) {
			res.Backoff = append(res.Backoff, a)
			continue
		}
		foreign, err := s.del(ctx, list, a)
		for _, f := range foreign {
			if s.cfg.PluginFailed != nil {
				s.cfg.PluginFailed(f.Plugin)
			}
			if k := (reported{a, f.Plugin}); !s.reported[k] {
				s.reported[k] = true
				s.logf("DEL of %s: plugin %q failed, ours went on: %v", a, f.Plugin, f.Err)
			}
		}
		res.Foreign = append(res.Foreign, foreign...)
		if s.cfg.Deleted != nil {
			s.cfg.Deleted(a, err)
		}
		if err != nil {
			f := s.failed[a]
			f.n++
			f.next = now.Add(backoff(s.cfg.Interval, f.n))
			s.failed[a] = f
			s.logf("DEL of %s (host interface %s missing since %s) failed %d times, next try after %s: %v",
				a, orphans[a], first.UTC().Format(time.RFC3339), f.n, f.next.UTC().Format(time.RFC3339), err)
			res.Failed = append(res.Failed, a)
			continue
		}
		s.forget(a)
		s.logf("DEL of %s replayed: its host interface %s has been missing and its netns gone since %s, no ADD or DEL of it in flight",
			a, orphans[a], first.UTC().Format(time.RFC3339))
		res.Deleted = append(res.Deleted, a)
	}
	return res, nil
}

// orphans are the attachments of network whose host interface is missing,
// whose netns is known to be gone (netns.Check) and that no ADD or DEL has
// in flight, with that interface's name; kept are those whose interface is
// missing but whose netns is not known to be gone, with why. The in-flight
// records are read after the ports: an ADD that claims after the read of
// the ports has no port in it yet.
func (s *Sweeper) orphans(ctx context.Context, network string) (orphans, kept map[ovsdb.Attachment]string, err error) {
	cli, err := ovsdb.Dial(ctx, s.cfg.OVSDB)
	if err != nil {
		return nil, nil, err
	}
	defer cli.Close()
	ports, err := cli.OwnedPorts(ctx)
	if err != nil {
		return nil, nil, err
	}
	out, kept := map[ovsdb.Attachment]string{}, map[ovsdb.Attachment]string{}
	for _, p := range ports {
		a := p.Attachment()
		// Only veths (the netdev and the kernel datapath both name them
		// type "" or "system"), and only this conflist's network: another
		// network's attachment (a second conflist, Multus) is not this
		// conflist's to delete.
		if a.ContainerID == "" || a.IfName == "" || p.Port.ExternalIDs[ovsdb.KeyNetwork] != network ||
			(p.Interface.Type != "" && p.Interface.Type != "system") {
			continue
		}
		ok, err := s.linkExists(p.Port.Name)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			continue
		}
		ids := p.Port.ExternalIDs
		ino, _ := strconv.ParseUint(ids[ovsdb.KeyNetNSInode], 10, 64) // 0: not recorded
		if state, why := netns.Check(ids[ovsdb.KeyNetNS], ino); state != netns.Gone {
			kept[a] = why
			continue
		}
		out[a] = p.Port.Name
	}
	if len(out) == 0 {
		return out, kept, nil
	}
	adding, err := cli.Adding(ctx)
	if err != nil {
		return nil, nil, err
	}
	deleting, err := cli.Deleting(ctx)
	if err != nil {
		return nil, nil, err
	}
	for a := range out {
		if adding[a] || deleting[a] {
			delete(out, a)
		}
	}
	return out, kept, nil
}

// Ours are the plugins whose DEL removes the attachment's record (its port
// row and what hangs off it): the sweep finds orphans by that record.
var ours = map[string]bool{"ovs-bridge": true, "ovs-portmap": true, "ovs-bandwidth": true}

// PluginFailure is the DEL of another project's plugin of the chain that
// failed (or could not be found) while ours succeeded.
type PluginFailure struct {
	Attachment ovsdb.Attachment
	Plugin     string // its type
	Err        error
}

// del executes the conflist's DEL for a, without a netns (valid CNI: the
// netns is gone), as the runtime would have: each plugin's, last first.
// Unlike the runtime it goes on past a plugin that is not ours: many
// cannot DEL without a netns (the reference sbr locks the netns path), or
// are not in the bin dir the agent sees; stopping there would keep our
// plugins from removing the port, flows, host ports and address, and the
// attachment, still recorded, would be found and fail again every pass.
// Their failures come back in foreign. The first of ours that fails ends
// the DEL (err): the next of ours would remove the record that the failed
// one's retry needs. Each plugin runs as a chain of one: the sweep's
// cache dir holds no result of the runtime's, so none loses a prevResult.
func (s *Sweeper) del(ctx context.Context, list *libcni.NetworkConfigList, a ovsdb.Attachment) (foreign []PluginFailure, err error) {
	cache := s.cfg.CacheDir
	if cache == "" {
		cache = defaultCacheDir()
	}
	cfg := libcni.NewCNIConfigWithCacheDir(s.cfg.CNIPath, cache, nil)
	rt := &libcni.RuntimeConf{ContainerID: a.ContainerID, IfName: a.IfName}
	for i := len(list.Plugins) - 1; i >= 0; i-- {
		p := list.Plugins[i]
		one := &libcni.NetworkConfigList{Name: list.Name, CNIVersion: list.CNIVersion, Plugins: []*libcni.PluginConfig{p}}
		pctx, cancel := context.WithTimeout(ctx, delTimeout)
		err := cfg.DelNetworkList(pctx, one, rt)
		cancel()
		if err == nil {
			continue
		}
		if !ours[p.Network.Type] {
			foreign = append(foreign, PluginFailure{Attachment: a, Plugin: p.Network.Type, Err: err})
			continue
		}
		return foreign, fmt.Errorf("DEL of %s: %w", a, err)
	}
	return foreign, nil
}

func (s *Sweeper) logf(format string, args ...any) {
	fmt.Fprintf(s.cfg.Log, "%s orphans: %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
}

func cmpAttachment(x, y ovsdb.Attachment) int {
	if x.ContainerID != y.ContainerID {
		if x.ContainerID < y.ContainerID {
			return -1
		}
		return 1
	}
	switch {
	case x.IfName < y.IfName:
		return -1
	case x.IfName > y.IfName:
		return 1
	}
	return 0
}

// defaultCacheDir is libcni's cache for the replayed DELs: a DEL reads a
// cached result when there is one (the runtime's cache is not the agent's
// to read) and removes it; it writes nothing.
func defaultCacheDir() string { return filepath.Join(os.TempDir(), "ovsflow-orphans") }
