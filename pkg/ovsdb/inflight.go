package ovsdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
)

// In-flight records: what an ADD or a DEL has started and not finished. They
// live in the external_ids of the root row, a column ovs-vswitchd does not
// watch (writing it starts no reconfiguration of the bridges), so that an
// ofport and an identity can be made an ADD's before its port row exists
// and before any flow goes in for them (claim, then act):
//
//	ovsflow.io/ofport.N      "C/I T"  ofport N is claimed by attachment C/I since unix time T
//	ovsflow.io/identity.X    "C/I T"  identity X (the flows' cookie) is claimed by C/I
//	ovsflow.io/deleting.C/I  "T"      a DEL of C/I is under way
//	ovsflow.io/sweep         "1"      a sweep (reconcile) is under way, since
//	ovsflow.io/sweep-since   "T"
//	ovsflow.io/swept.C/I     "1"      a sweep ran while C/I was being added
//
// A claim and a deleting mark are taken only while no sweep is under way
// (the transaction fails at once otherwise and the caller waits); AttachPort
// hands the claims over to the port row it inserts (its ofport_request and
// KeyIdentity) in the same transaction, and fails while a sweep is under way
// or after one ran since the claim (swept): the ADD then applies its flows
// again, since a sweep after an ovs-vswitchd restart rebuilds only what the
// records of existing ports say. So a sweep sees every attachment either as
// in flight or as a port, never as neither while its flows are in.
const (
	keyClaimOFPort   = "ovsflow.io/ofport."
	keyClaimIdentity = "ovsflow.io/identity."
	keyDeleting      = "ovsflow.io/deleting."
	keySweep         = "ovsflow.io/sweep"
	keySweepSince    = "ovsflow.io/sweep-since"
	keySwept         = "ovsflow.io/swept."

	// KeyIdentity, on a Port row, is the identity its ADD claimed (the
	// cookie of its flows): at most one Port row holds each.
	KeyIdentity = "ovsflow.io/identity"
)

const (
	// ClaimTTL is how long a claim of an ADD that never finished (killed)
	// protects its ofport and flows; a sweep removes older ones. It is
	// longer than any ADD may take (cnicmd.MaxTimeout): no claim of an ADD
	// still running expires.
	ClaimTTL = 5 * time.Minute
	// DeletingTTL is the same for the mark of a DEL, or of a GC, which
	// marks what it removes as DEL does: twice as long as either may take
	// (cnicmd.MaxDelTimeout), so that no mark of one still running
	// expires.
	DeletingTTL = 2 * time.Minute
	// SweepTTL is how long a sweep may hold its mark: one that died
	// holding it for longer is taken over.
	SweepTTL = time.Minute
	// waitGrace is how much later than its own timeout the answer to a
	// wait operation may come before the client gives up on it: a
	// loaded ovsdb-server (seen in the emulated guest on a busy host)
	// answers a 1 s wait 2-3 s late.
	waitGrace = 5 * time.Second
)

// ErrClaimLost says that the claims of a reservation are gone (a sweep
// expired them, ClaimTTL): the caller reserves again and applies its flows
// again.
var ErrClaimLost = errors.New("the claim expired")

// ErrSweeping says that a sweep was under way, or ran, while a change was
// to be made: the caller waits (WaitSweep) and makes it again.
var ErrSweeping = errors.New("a sweep is under way")

// IdentityTakenError says that the identity an attachment would claim (the
// cookie of its flows) is held by another attachment.
type IdentityTakenError struct {
	Identity string
	Holder   Attachment
}

func (e *IdentityTakenError) Error() string {
	return fmt.Sprintf("identity %s is already held by attachment %s", e.Identity, e.Holder)
}

// Reservation is what Reserve made an ADD's.
type Reservation struct {
	Attachment Attachment
	OFPort     int
	Identity   string
	value      string
}

func claimValue(a Attachment, now time.Time) string {
	return a.String() + " " + strconv.FormatInt(now.Unix(), 10)
}

// parseClaim splits a claim's value into its attachment and time.
func parseClaim(v string) (Attachment, time.Time, bool) {
	id, ts, ok := strings.Cut(v, " ")
	if !ok {
		return Attachment{}, time.Time{}, false
	}
	c, i, ok := strings.Cut(id, "/")
	n, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil {
		return Attachment{}, time.Time{}, false
	}
	return Attachment{ContainerID: c, IfName: i}, time.Unix(n, 0), true
}

func rootMutate(m ovsdb.Mutator, v any) operation {
	return mutateOp(tableRoot, allRows, mut("external_ids", m, v))
}

// rootWait fails at once unless some root row has (present) or none has
// (!present) the pairs of m in its external_ids.
func rootWait(m strMap, present bool) operation {
	until := untilEqual
	if present {
		until = untilNotEqual
	}
	return waitOp(tableRoot, []ovsdb.Condition{cond("external_ids", fnIncludes, m.ovs())}, []string{"_uuid"}, until, 0)
}

// noSweep fails at once while a sweep is under way.
func noSweep() operation { return rootWait(strMap{keySweep: "1"}, false) }

// waitNone fails at once if a row of table matches where.
func waitNone(table string, where ...ovsdb.Condition) operation {
	return waitOp(table, where, []string{"_uuid"}, untilEqual, 0)
}

// Reserve claims for attachment a the first free ofport from home on (as
// ChooseOFPort) and identity, in one transaction that fails unless no
// interface requests or holds the ofport, no other attachment claims either
// and no port holds the identity. Leftover claims of a's own (an ADD of a
// that was killed) are given up. It waits while a sweep is under way.
func (c *Client) Reserve(ctx context.Context, a Attachment, home int, identity string) (Reservation, error) {
	r := Reservation{Attachment: a, OFPort: home, Identity: identity, value: claimValue(a, time.Now())}
	var drop []string
	for attempt := 0; ; attempt++ {
		ops := reserveOps(r, drop)
		_, err := c.transact(ctx, ops...)
		if err == nil {
			return r, nil
		}
		w := timedOutWait(err)
		if w == nil || attempt >= 16 {
			return Reservation{}, fmt.Errorf("claiming ofport %d for %s: %w", r.OFPort, a, err)
		}
		if w.Index == 0 {
			if err := c.WaitSweep(ctx); err != nil {
				return Reservation{}, err
			}
			continue
		}
		// Taken: find what is free and what of a's own is left over.
		claims, err := c.rootIDs(ctx)
		if err != nil {
			return Reservation{}, err
		}
		drop = drop[:0]
		held := map[int]bool{}
		for k, v := range claims {
			holder, _, ok := parseClaim(v)
			switch {
			case !ok:
			case holder == a && (strings.HasPrefix(k, keyClaimOFPort) || strings.HasPrefix(k, keyClaimIdentity)):
				drop = append(drop, k)
			case strings.HasPrefix(k, keyClaimOFPort):
				if n, err := strconv.Atoi(k[len(keyClaimOFPort):]); err == nil {
					held[n] = true
				}
			case k == keyClaimIdentity+identity:
				return Reservation{}, &IdentityTakenError{Identity: identity, Holder: holder}
			}
		}
		if holder, ok, err := c.identityHolder(ctx, identity); err != nil {
			return Reservation{}, err
		} else if ok && holder != a {
			return Reservation{}, &IdentityTakenError{Identity: identity, Holder: holder}
		}
		from := r.OFPort
		if w.Table == tableInterface || held[from] {
			from++
		}
		for {
			p, err := c.ChooseOFPort(ctx, from)
			if err != nil {
				return Reservation{}, err
			}
			if !held[p] {
				r.OFPort = p
				break
			}
			from = p + 1
		}
	}
}

// reserveOps are Reserve's transaction. The first operation is the wait
// for no sweep (Reserve tells its failure by its index).
func reserveOps(r Reservation, drop []string) []operation {
	claims := strMap{keyClaimOFPort + strconv.Itoa(r.OFPort): r.value}
	if r.Identity != "" {
		claims[keyClaimIdentity+r.Identity] = r.value
	}
	ops := []operation{noSweep()}
	if len(drop) > 0 {
		ops = append(ops, rootMutate(mutDelete, strSet(drop...)))
	}
	// A map insert leaves a key that is there alone: the wait finds out
	// whether the value is ours.
	ops = append(ops, rootMutate(mutInsert, claims.ovs()), rootWait(claims, true),
		waitNone(tableInterface, cond("ofport_request", fnEqual, r.OFPort)),
		waitNone(tableInterface, cond("ofport", fnEqual, r.OFPort)))
	if r.Identity != "" {
		ops = append(ops, waitNone(tablePort, cond("external_ids", fnIncludes, strMap{KeyIdentity: r.Identity}.ovs())))
	}
	return ops
}

// Release gives up r's claims (an ADD that failed before its port).
func (c *Client) Release(ctx context.Context, r Reservation) error {
	if r.value == "" {
		return nil
	}
	_, err := c.transact(ctx, rootMutate(mutDelete, r.claims().ovs()), rootMutate(mutDelete, strSet(keySwept+r.Attachment.String())))
	return err
}

func (r Reservation) claims() strMap {
	m := strMap{keyClaimOFPort + strconv.Itoa(r.OFPort): r.value}
	if r.Identity != "" {
		m[keyClaimIdentity+r.Identity] = r.value
	}
	return m
}

// handOverOps are the operations AttachPort adds for a reservation: the
// claims go (the port row holds the ofport and the identity from now on),
// and the insert fails while a sweep is under way or after one ran since
// the claim.
func (r Reservation) handOverOps() []operation {
	return []operation{noSweep(), rootWait(strMap{keySwept + r.Attachment.String(): "1"}, false),
		rootWait(r.claims(), true), rootMutate(mutDelete, r.claims().ovs())}
}

// handOverClaimWait is the index of the wait in handOverOps that finds the
// claims gone.
const handOverClaimWait = 2

// AfterSweep readies r for another AttachPort after ErrSweeping: it waits
// for the sweep to end and takes the swept mark away; the caller applies
// its flows again first.
func (c *Client) AfterSweep(ctx context.Context, r Reservation) error {
	if err := c.WaitSweep(ctx); err != nil {
		return err
	}
	_, err := c.transact(ctx, rootMutate(mutDelete, strSet(keySwept+r.Attachment.String())))
	return err
}

// WaitSweep returns once no sweep is under way, or fails with ErrSweeping
// when ctx is about to end first (waitTime). It blocks in ovsdb-server (a
// wait operation, not polling), a second at most each round, so that a
// mark held for longer than SweepTTL, a dead sweep's, is seen and removed.
func (c *Client) WaitSweep(ctx context.Context) error {
	ctx, cancel := endpoint.Bounded(ctx)
	defer cancel()
	for {
		if left := min(waitTime(ctx), time.Second); left >= minWait {
			w := noSweep()
			*w.Timeout = int(left / time.Millisecond)
			_, err := c.transact(ctx, w)
			if err == nil {
				return nil
			}
			if !waitTimedOut(err) {
				return fmt.Errorf("waiting for the sweep: %w", err)
			}
		}
		ids, err := c.rootIDs(ctx)
		if err != nil {
			return err
		}
		if ids[keySweep] == "" {
			return nil
		}
		since, _ := strconv.ParseInt(ids[keySweepSince], 10, 64)
		if time.Since(time.Unix(since, 0)) > SweepTTL {
			_, err := c.transact(ctx, rootWait(strMap{keySweepSince: ids[keySweepSince]}, true),
				rootMutate(mutDelete, strSet(keySweep, keySweepSince)))
			if err != nil && timedOutWait(err) == nil {
				return err
			}
			continue
		}
		if waitTime(ctx) < minWait {
			return fmt.Errorf("waiting for the sweep under way since %s: %w", time.Unix(since, 0).UTC().Format(time.RFC3339), ErrSweeping)
		}
	}
}

// Adding returns the attachments with an ADD in flight: those holding
// claims.
func (c *Client) Adding(ctx context.Context) (map[Attachment]bool, error) {
	ids, err := c.rootIDs(ctx)
	if err != nil {
		return nil, err
	}
	out := map[Attachment]bool{}
	for k, v := range ids {
		if strings.HasPrefix(k, keyClaimOFPort) || strings.HasPrefix(k, keyClaimIdentity) {
			if a, _, ok := parseClaim(v); ok {
				out[a] = true
			}
		}
	}
	return out, nil
}

// Deleting returns the attachments with a DEL in flight: those under a
// deleting mark younger than DeletingTTL (an older one is a killed DEL's,
// which the next sweep removes).
func (c *Client) Deleting(ctx context.Context) (map[Attachment]bool, error) {
	ids, err := c.rootIDs(ctx)
	if err != nil {
		return nil, err
	}
	out := map[Attachment]bool{}
	for k, v := range ids {
		rest, ok := strings.CutPrefix(k, keyDeleting)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		ci, i, ok := strings.Cut(rest, "/")
		if err == nil && ok && time.Since(time.Unix(n, 0)) <= DeletingTTL {
			out[Attachment{ContainerID: ci, IfName: i}] = true
		}
	}
	return out, nil
}

// rootIDs reads the root row's external_ids.
func (c *Client) rootIDs(ctx context.Context) (map[string]string, error) {
	res, err := c.transact(ctx, selectRoot("external_ids"))
	if err != nil {
		return nil, fmt.Errorf("reading the in-flight records: %w", err)
	}
	roots, err := decode[rootIDs](tableRoot, res[0].Rows)
	if err != nil || len(roots) != 1 {
		return nil, fmt.Errorf("reading the in-flight records: %d root rows: %v", len(roots), err)
	}
	return roots[0].ExternalIDs, nil
}

type rootIDs struct {
	ExternalIDs map[string]string `ovsdb:"external_ids"`
}

// identityHolder returns the attachment of the port that holds identity.
func (c *Client) identityHolder(ctx context.Context, identity string) (Attachment, bool, error) {
	if identity == "" {
		return Attachment{}, false, nil
	}
	op := selectOp(tablePort, cond("external_ids", fnIncludes, strMap{KeyIdentity: identity}.ovs()))
	op.Columns = []string{"_uuid", "name", "external_ids"}
	res, err := c.transact(ctx, op)
	if err != nil {
		return Attachment{}, false, fmt.Errorf("looking up identity %s: %w", identity, err)
	}
	ps, err := decode[Port](tablePort, res[0].Rows)
	if err != nil || len(ps) == 0 {
		return Attachment{}, false, err
	}
	return OwnedPort{Port: ps[0]}.Attachment(), true, nil
}

// Deletion is what BeginDelete found of one attachment: its ports and its
// in-flight claims. Finish removes the ports and the claims with the mark.
type Deletion struct {
	Attachment Attachment
	Ports      []OwnedPort
	claims     []string
	claimed    bool
	mark       string
}

// Claimed reports whether an ADD of the attachment that has no port yet
// holds claims: the flows of its cookie are its own to remove.
func (d *Deletion) Claimed() bool { return d.claimed }

// BeginDelete marks a DEL of attachment a as under way (a sweep then
// restores no flow of a's), and returns a's ports and claims, in one
// transaction. It waits while a sweep is under way.
func (c *Client) BeginDelete(ctx context.Context, a Attachment) (*Deletion, error) {
	d := &Deletion{Attachment: a, mark: keyDeleting + a.String()}
	for {
		ops := []operation{noSweep(),
			rootMutate(mutInsert, strMap{d.mark: strconv.FormatInt(time.Now().Unix(), 10)}.ovs()),
			selectModel[Port](tablePort, a.where()...), selectModel[Interface](tableInterface, a.where()...),
			selectRoot("external_ids")}
		res, err := c.transact(ctx, ops...)
		if w := timedOutWait(err); w != nil && w.Index == 0 {
			if err := c.WaitSweep(ctx); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("beginning the DEL of %s: %w", a, err)
		}
		if d.Ports, err = joinPorts(res[2].Rows, res[3].Rows); err != nil {
			return nil, err
		}
		roots, err := decode[rootIDs](tableRoot, res[4].Rows)
		if err != nil || len(roots) != 1 {
			return nil, fmt.Errorf("reading the in-flight records: %v", err)
		}
		for k, v := range roots[0].ExternalIDs {
			if holder, _, ok := parseClaim(v); ok && holder == a {
				d.claims, d.claimed = append(d.claims, k), true
			}
		}
		d.claims = append(d.claims, keySwept+a.String())
		return d, nil
	}
}

// Finish removes the ports of d, its claims and its mark in one
// transaction.
func (c *Client) Finish(ctx context.Context, d *Deletion) error {
	ops := append(detachOps(PortUUIDs(d.Ports)), rootMutate(mutDelete, strSet(append(d.claims, d.mark)...)))
	if len(d.Ports) > 0 {
		ops = append(ops, bumpCfg)
	}
	if _, err := c.transact(ctx, ops...); err != nil {
		return fmt.Errorf("detaching %d port(s) of %s: %w", len(d.Ports), d.Attachment, err)
	}
	return nil
}

// Abandon ends d removing nothing but its mark: the ports and the claims of
// its attachment stay (GC leaves an attachment whose ADD is in flight to
// that ADD; ovs-portmap withdraws host ports under the mark, and the ports
// are not its own).
func (c *Client) Abandon(ctx context.Context, d *Deletion) error {
	if _, err := c.transact(ctx, rootMutate(mutDelete, strSet(d.mark))); err != nil {
		return fmt.Errorf("giving up the DEL of %s: %w", d.Attachment, err)
	}
	return nil
}

// PortUUIDs are the UUIDs of the Port rows of ports.
func PortUUIDs(ports []OwnedPort) []string {
	out := make([]string, len(ports))
	for i, p := range ports {
		out[i] = p.Port.UUID
	}
	return out
}

// Sweep is a sweep under way: while it is, no ADD claims and no DEL
// begins, and no port of an ADD is inserted.
type Sweep struct {
	// Adding and Deleting are the attachments with an ADD or a DEL in
	// flight when the sweep began, and since when.
	Adding, Deleting map[Attachment]time.Time
	since            string
	expired          []string
}

// BeginSweep marks a sweep as under way and returns what is in flight. When
// another sweep is under way, it waits for it to end first.
func (c *Client) BeginSweep(ctx context.Context) (*Sweep, error) {
	for {
		now := time.Now()
		s := &Sweep{Adding: map[Attachment]time.Time{}, Deleting: map[Attachment]time.Time{}, since: strconv.FormatInt(now.Unix(), 10)}
		res, err := c.transact(ctx, noSweep(),
			rootMutate(mutInsert, strMap{keySweep: "1", keySweepSince: s.since}.ovs()),
			selectRoot("external_ids"))
		if w := timedOutWait(err); w != nil {
			if err := c.WaitSweep(ctx); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("beginning a sweep: %w", err)
		}
		roots, err := decode[rootIDs](tableRoot, res[2].Rows)
		if err != nil || len(roots) != 1 {
			return nil, fmt.Errorf("reading the in-flight records: %v", err)
		}
		ids := roots[0].ExternalIDs
		for k, v := range ids {
			switch {
			case strings.HasPrefix(k, keyClaimOFPort), strings.HasPrefix(k, keyClaimIdentity):
				a, t, ok := parseClaim(v)
				if !ok || now.Sub(t) > ClaimTTL {
					s.expired = append(s.expired, k)
					continue
				}
				if old, seen := s.Adding[a]; !seen || t.Before(old) {
					s.Adding[a] = t
				}
			case strings.HasPrefix(k, keyDeleting):
				n, err := strconv.ParseInt(v, 10, 64)
				c, i, ok := strings.Cut(k[len(keyDeleting):], "/")
				if err != nil || !ok || now.Sub(time.Unix(n, 0)) > DeletingTTL {
					s.expired = append(s.expired, k)
					continue
				}
				s.Deleting[Attachment{ContainerID: c, IfName: i}] = time.Unix(n, 0)
			}
		}
		for k := range ids {
			// A swept mark outlives the claims only when its ADD failed.
			if rest, ok := strings.CutPrefix(k, keySwept); ok {
				c, i, _ := strings.Cut(rest, "/")
				if _, claimed := s.Adding[Attachment{ContainerID: c, IfName: i}]; !claimed {
					s.expired = append(s.expired, k)
				}
			}
		}
		return s, nil
	}
}

// End ends the sweep: the ADDs in flight are marked swept, expired records
// go, and the mark goes.
func (c *Client) EndSweep(ctx context.Context, s *Sweep) error {
	swept := strMap{}
	for a := range s.Adding {
		swept[keySwept+a.String()] = "1"
	}
	ops := []operation{rootMutate(mutDelete, strSet(append(s.expired, keySweep, keySweepSince)...))}
	if len(swept) > 0 {
		ops = append(ops, rootMutate(mutInsert, swept.ovs()))
	}
	// Only our own mark: a sweep that outlived SweepTTL may have lost it.
	ops = append([]operation{rootWait(strMap{keySweepSince: s.since}, true)}, ops...)
	if _, err := c.transact(ctx, ops...); err != nil {
		return fmt.Errorf("ending the sweep: %w", err)
	}
	return nil
}
