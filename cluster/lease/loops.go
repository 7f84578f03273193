package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func (m *Manager) startLoops() {
	m.every(m.ttl/3, nil, m.heartbeat)
	m.every(m.ttl/3, m.kickWriter, m.writeLeases)
	m.every(m.ttl/3, m.kickReconcile, m.reconcile)
	m.every(m.ttl/2, nil, m.relist)
	kick(m.kickReconcile)
}

// every runs step every period and whenever kicked, until the Manager stops.
func (m *Manager) every(period time.Duration, kicked chan struct{}, step func()) {
	m.loops.Add(1)
	go func() {
		defer m.loops.Done()
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-m.ctx.Done():
				return
			case <-t.C:
			case <-kicked:
			}
			if !m.waitUnpaused() {
				return
			}
			step()
		}
	}()
}

// waitUnpaused blocks while a test pauses this node; false once stopped.
func (m *Manager) waitUnpaused() bool {
	m.mu.Lock()
	p := m.paused
	m.mu.Unlock()
	if p != nil {
		select {
		case <-p:
		case <-m.ctx.Done():
		}
	}
	return m.ctx.Err() == nil
}

// callCtx bounds one KV call of the loops: a third of the TTL, so a lost
// reply cannot delay the next renewal past the TTL.
func (m *Manager) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(m.ctx, m.ttl/3)
}

// heartbeat puts this node's heartbeat unless it is leaving.
func (m *Manager) heartbeat() {
	m.hbMu.Lock()
	defer m.hbMu.Unlock()
	m.mu.Lock()
	closing := m.closing
	m.mu.Unlock()
	if closing {
		return
	}
	// Back after its heartbeat lapsed: rejoin only when ready.
	if m.cfg.Ready != nil && !m.lastHB.IsZero() && time.Since(m.lastHB) > m.ttl && !m.cfg.Ready() {
		return
	}
	if _, err := m.putHeartbeat(m.ctx); err == nil {
		m.lastHB = time.Now()
		m.hbAt.Store(m.lastHB.UnixNano())
	}
}

func (m *Manager) putHeartbeat(ctx context.Context) (uint64, error) {
	b, _ := json.Marshal(heartbeat{Node: m.cfg.Node, Addr: m.cfg.Addr, Started: m.started, Cores: m.cfg.Cores})
	c, cancel := context.WithTimeout(ctx, m.ttl/3)
	defer cancel()
	rev, err := m.nodesKV.Put(c, m.cfg.Node, b)
	if err != nil && ctx == m.ctx && m.ctx.Err() == nil {
		m.log.Warn("lease: heartbeat failed; retrying next period", "err", err)
	}
	return rev, err
}

// startWatchers reads both buckets through watchers (so New returns with a
// full view) and keeps them watched.
func (m *Manager) startWatchers(ctx context.Context) error {
	for _, b := range []struct {
		kv     jetstream.KeyValue
		update func(jetstream.KeyValueEntry)
	}{{m.nodesKV, m.nodeUpdate}, {m.leasesKV, m.leaseUpdate}} {
		// The watcher lives as long as the Manager, so it gets m.ctx.
		w, err := retry(ctx, setupCallTimeout, func(context.Context) (jetstream.KeyWatcher, error) {
			return b.kv.WatchAll(m.ctx)
		})
		if err != nil {
			return fmt.Errorf("lease: watch %s: %w", b.kv.Bucket(), err)
		}
		m.mu.Lock()
		m.watchers = append(m.watchers, w)
		m.mu.Unlock()
		if err := readInitial(ctx, w, b.update); err != nil {
			return fmt.Errorf("lease: watch %s: %w", b.kv.Bucket(), err)
		}
		m.loops.Add(1)
		go m.follow(w, b.update)
	}
	return nil
}

// readInitial applies the current values up to the watcher's nil marker.
func readInitial(ctx context.Context, w jetstream.KeyWatcher, update func(jetstream.KeyValueEntry)) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watcher closed")
			}
			if e == nil {
				return nil
			}
			update(e)
		}
	}
}

// follow applies watched updates until the watcher is stopped. It keeps
// draining after a stop: the client blocks on a full channel.
func (m *Manager) follow(w jetstream.KeyWatcher, update func(jetstream.KeyValueEntry)) {
	defer m.loops.Done()
	for e := range w.Updates() {
		if e != nil && m.waitUnpaused() {
			update(e)
		}
	}
	if !m.isStopped() {
		m.log.Warn("lease: a bucket watch ended (connection closed?); only relisting keeps the view now")
	}
}

func (m *Manager) nodeUpdate(e jetstream.KeyValueEntry) {
	m.mu.Lock()
	changed := m.nodes.apply(e, time.Now())
	m.mu.Unlock()
	if changed {
		kick(m.kickReconcile)
	}
}

func (m *Manager) leaseUpdate(e jetstream.KeyValueEntry) {
	m.mu.Lock()
	changed := m.leases.apply(e, time.Now())
	m.checkHeldLocked(e)
	m.mu.Unlock()
	if changed {
		kick(m.kickReconcile)
	}
}

// checkHeldLocked: a write to a held key after this node created it that is
// not this node's own means another node has it now.
func (m *Manager) checkHeldLocked(e jetstream.KeyValueEntry) {
	hk := m.held[e.Key()]
	if hk == nil || hk.released || e.Revision() <= hk.token {
		return // released: the delete is this node's own
	}
	if e.Operation() != jetstream.KeyValuePut {
		m.loseLocked(e.Key(), hk.token, "lease deleted by someone else")
		return
	}
	v := decodeLease(entry{rev: e.Revision(), value: e.Value()})
	if v.Node != m.cfg.Node || v.Token != hk.token {
		m.loseLocked(e.Key(), hk.token, fmt.Sprintf("lease taken by %s (token %d)", v.Node, v.Token))
	}
}

// relist re-reads both buckets: an expired key leaves no trace in a watch.
func (m *Manager) relist() {
	start := time.Now()
	ctx, cancel := context.WithTimeout(m.ctx, m.ttl/2)
	defer cancel()
	nodes, errN := list(ctx, m.nodesKV)
	leases, errL := list(ctx, m.leasesKV)
	now := time.Now()
	m.mu.Lock()
	changed := false
	if errN == nil {
		changed = m.nodes.replace(nodes, start, now)
	}
	if errL == nil {
		changed = m.leases.replace(leases, start, now) || changed
		for _, e := range leases {
			m.checkHeldLocked(e)
		}
	}
	m.mu.Unlock()
	if err := errors.Join(errN, errL); err != nil && m.ctx.Err() == nil {
		m.log.Warn("lease: listing the buckets failed", "err", err)
	}
	if changed {
		kick(m.kickReconcile)
	}
}

// membershipFrozen: while this node's own heartbeats fail (the nodes
// bucket elects a leader, or this node is cut off) it cannot tell who is
// alive, as the others' heartbeats fail alike. It keeps the membership it
// knew rather than see every node die and hand every key around.
func (m *Manager) membershipFrozen(now time.Time) bool {
	return now.Sub(time.Unix(0, m.hbAt.Load())) > m.ttl
}

// nodeGoneLocked tells whether a node's heartbeat e has expired: older
// than the TTL, and older by more than half a TTL than this node's last
// stored heartbeat, so that the bucket took heartbeats after e's next one
// was due (they go every third of a TTL). Before membership freezes, a
// peer whose last heartbeat came just before this node's last one would
// otherwise expire here first, in an outage of the bucket.
func (m *Manager) nodeGoneLocked(e entry, now time.Time) bool {
	return now.Sub(e.seen) > m.nodes.ttl && time.Unix(0, m.hbAt.Load()).Sub(e.seen) > m.nodes.ttl/2
}

// plan is what one reconcile does.
type plan struct {
	acquire []string
	stale   map[string]uint64 // acquire after deleting this node's leftover lease at that revision
}

// reconcile releases what another live node should own (or nobody should)
// and acquires the unowned keys this node should own.
func (m *Manager) reconcile() {
	p := m.plan()
	for _, k := range p.acquire {
		if m.ctx.Err() != nil {
			return
		}
		m.acquire(k, p.stale[k])
	}
}

func (m *Manager) plan() plan {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.membershipFrozen(now) {
		for k, e := range m.nodes.m {
			if m.nodeGoneLocked(e, now) {
				delete(m.nodes.m, k)
			}
		}
	}
	m.leases.expire(now)
	members := m.membersLocked(now)
	desired := AssignWeighted(workKeys(m.keys), memberNames(members), func(node string) int { return members[node].Cores })
	desired[memberKey(m.cfg.Node)] = m.cfg.Node
	m.loseExpiredLocked(now)
	m.startReleasesLocked(desired)
	if m.closing {
		return plan{}
	}
	return m.acquisitionsLocked(desired)
}

// acquisitionsLocked lists the keys this node should own that nobody holds
// (or only a leftover lease of this node's previous run).
func (m *Manager) acquisitionsLocked(desired map[string]string) plan {
	p := plan{stale: make(map[string]uint64)}
	for _, k := range m.keys {
		if desired[k] != m.cfg.Node || m.held[k] != nil {
			continue
		}
		if e, ok := m.leases.m[k]; ok {
			if v, ok := m.leaseLocked(k, e); ok && v.Node != m.cfg.Node {
				continue // held by another node: it releases it or it expires
			}
			p.stale[k] = e.rev // this node's leftover, or a record that is nobody's
		}
		p.acquire = append(p.acquire, k)
	}
	return p
}

// loseExpiredLocked gives up the leases not renewed within the TTL (this
// node was paused, or JetStream unreachable): another node may hold them
// already, so they cannot be released, only lost.
func (m *Manager) loseExpiredLocked(now time.Time) {
	for k, hk := range m.held {
		if !now.Before(hk.validUntil) {
			m.loseLocked(k, hk.token, "not renewed within the TTL")
		}
	}
}

// startReleasesLocked releases every held key that nobody should own now,
// that another (live) node should own, or all when closing.
func (m *Manager) startReleasesLocked(desired map[string]string) {
	for k, hk := range m.held {
		if hk.releasing {
			continue
		}
		owner, wanted := desired[k]
		if _, listed := slices.BinarySearch(m.keys, k); listed && !m.closing && (!wanted || owner == m.cfg.Node) {
			continue
		}
		hk.releasing = true
		token := hk.token
		m.log.Info("lease: releasing", "key", k, "token", token, "to", owner)
		m.emit(k, func() {
			if !IsMemberKey(k) {
				m.h.Release(k)
			}
			m.released(k, token)
		})
	}
}

// released marks a key whose Release returned; the writer deletes it.
func (m *Manager) released(key string, token uint64) {
	m.mu.Lock()
	if hk := m.held[key]; hk != nil && hk.token == token {
		hk.released = true
	}
	m.mu.Unlock()
	kick(m.kickWriter)
}

// acquire creates the lease of key. The value written by Create carries no
// token (it cannot know its revision); the first renewal, at once, adds it.
func (m *Manager) acquire(key string, staleRev uint64) {
	if staleRev != 0 {
		m.deleteAt(key, staleRev)
	}
	sent := time.Now()
	b, _ := json.Marshal(leaseValue{Node: m.cfg.Node, Since: sent})
	ctx, cancel := m.callCtx()
	rev, err := m.leasesKV.Create(ctx, key, b)
	cancel()
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) && m.ctx.Err() == nil {
			m.log.Warn("lease: acquire failed; retrying next period", "key", key, "err", err)
		}
		return
	}
	hk := held{token: rev, rev: rev, since: sent, acquired: time.Now(), validUntil: sent.Add(m.ttl)}
	m.mu.Lock()
	m.held[key] = &held{}
	*m.held[key] = hk // hk stays a private copy for the renewal below
	if !IsMemberKey(key) {
		m.emit(key, func() { m.h.Acquired(key, rev) })
	}
	m.mu.Unlock()
	m.log.Info("lease: acquired", "key", key, "token", rev)
	m.renew(key, hk)
}

// writeLeases renews every held lease and deletes the released ones. One
// goroutine does all writes to held leases, so a renewal never races the
// deletion that follows a Release.
func (m *Manager) writeLeases() {
	m.mu.Lock()
	keys := make([]string, 0, len(m.held))
	copies := make(map[string]held, len(m.held))
	for k, hk := range m.held {
		keys = append(keys, k)
		copies[k] = *hk
	}
	m.mu.Unlock()
	slices.Sort(keys)
	for _, k := range keys {
		if m.ctx.Err() != nil {
			return
		}
		if copies[k].released {
			m.deleteReleased(k, copies[k])
		} else {
			m.renew(k, copies[k])
		}
	}
}

func (m *Manager) renew(key string, hk held) {
	if !time.Now().Before(hk.validUntil) {
		m.lose(key, hk.token, "not renewed within the TTL")
		return
	}
	b, _ := json.Marshal(leaseValue{Node: m.cfg.Node, Token: hk.token, Since: hk.since})
	sent := time.Now()
	rev, err := m.update(key, b, hk.rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		// The reply to an earlier write may have been lost after the write
		// was stored: then the newer revision is still ours. Its write time
		// is unknown here, so renew once more rather than count on it.
		var cur uint64
		if cur, err = m.ownRevision(key, hk.token, err); err == nil {
			sent = time.Now()
			rev, err = m.update(key, b, cur)
		}
	}
	switch {
	case err == nil:
		m.renewed(key, hk.token, rev, sent)
	case m.ctx.Err() != nil:
		// Stopping.
	case transient(err):
		m.log.Warn("lease: renewal failed; retrying until the TTL runs out", "key", key, "err", err)
	default:
		m.lose(key, hk.token, "renewal failed: "+err.Error())
	}
}

func (m *Manager) update(key string, value []byte, rev uint64) (uint64, error) {
	ctx, cancel := m.callCtx()
	defer cancel()
	return m.leasesKV.Update(ctx, key, value, rev)
}

// ownRevision returns the current revision of key if it still carries this
// node's lease with token, else the original error.
func (m *Manager) ownRevision(key string, token uint64, orig error) (uint64, error) {
	ctx, cancel := m.callCtx()
	e, err := m.leasesKV.Get(ctx, key)
	cancel()
	if err != nil {
		return 0, errors.Join(orig, err)
	}
	v := decodeLease(entry{rev: e.Revision(), value: e.Value()})
	if v.Node != m.cfg.Node || v.Token != token {
		return 0, fmt.Errorf("%w (now held by %s, token %d)", orig, v.Node, v.Token)
	}
	return e.Revision(), nil
}

func (m *Manager) renewed(key string, token, rev uint64, sent time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if hk := m.held[key]; hk != nil && hk.token == token {
		hk.rev = rev
		hk.validUntil = sent.Add(m.ttl)
	}
}

func (m *Manager) lose(key string, token uint64, why string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loseLocked(key, token, why)
}

// loseLocked forgets a held lease and tells the handler, unless it is
// already giving the key up (then it learns through its fenced writes).
func (m *Manager) loseLocked(key string, token uint64, why string) {
	hk := m.held[key]
	if hk == nil || hk.token != token {
		return
	}
	m.dropLocked(key)
	m.log.Warn("lease: lost", "key", key, "token", token, "why", why)
	if !hk.releasing && !IsMemberKey(key) {
		m.emit(key, func() { m.h.Lost(key) })
	}
}

func (m *Manager) dropLocked(key string) {
	delete(m.held, key)
	m.noteDrainedLocked()
}

// deleteReleased deletes the lease of a released key so that its next owner
// can create it at once, then stops holding it (Close waits for that).
func (m *Manager) deleteReleased(key string, hk held) {
	m.deleteAt(key, hk.rev)
	m.mu.Lock()
	if cur := m.held[key]; cur != nil && cur.token == hk.token {
		m.dropLocked(key)
	}
	m.mu.Unlock()
	m.log.Info("lease: released", "key", key, "token", hk.token)
}

// deleteAt deletes key if it is still at revision rev. It tries for one TTL
// at most (it runs on the writer, which must get back to renewing); by then
// the lease expires anyway.
func (m *Manager) deleteAt(key string, rev uint64) {
	ctx, cancel := context.WithTimeout(m.ctx, m.ttl)
	defer cancel()
	_, err := retry(ctx, m.ttl/3, func(c context.Context) (struct{}, error) {
		return struct{}{}, m.leasesKV.Delete(c, key, jetstream.LastRevision(rev))
	})
	if err != nil && m.ctx.Err() == nil {
		// It expires by itself within the TTL.
		m.log.Warn("lease: deleting the lease failed", "key", key, "rev", rev, "err", err)
	}
}
