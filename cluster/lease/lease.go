// Package lease decides which node of an mlstream cluster owns which unit of
// work ("key": a job's partition "clicks.p3" or its global unit
// "clicks.global"), on NATS JetStream KV alone: no consensus of its own, only
// KV compare-and-swap and bucket TTLs.
//
// Membership: every node Puts a heartbeat under its name into the KV bucket
// mls_nodes every TTL/3; the bucket's TTL removes the key of a node that
// stopped. The live nodes are the keys present.
//
// Ownership: the owner of a key holds a lease, a key of the bucket mls_leases
// (bucket TTL = TTL). It takes the lease with KV Create, which succeeds for
// one node only, and renews it with KV Update against the revision it last
// wrote, every TTL/3. A failed renewal, or a watched write by another node,
// means the lease is lost: Handler.Lost is called and the node stops
// counting the key as its own. A node also counts a lease as its own only
// until TTL after it sent its last successful write (the server starts the
// TTL later than that), so Owned never shows a key another node may already
// hold.
//
// Fencing token: the KV revision at which a node created its lease. It stays
// the same through renewals, and a later owner's token is always larger
// (revisions only grow), so a store that remembers the largest token it has
// seen can refuse the writes of a stale owner.
//
// Assignment: every node computes the desired owner of every key from the
// sorted names of the live nodes with Assign (the same answer everywhere).
// A node creates the leases of the unowned keys it should own. A node that
// holds a key another live node should own gives it up gracefully: it calls
// Handler.Release (the owner takes its last backup) and then deletes the
// lease, and the desired owner, which watches the bucket, creates it at once.
// Keys are only ever handed to live nodes.
//
// Timing: the lease of a node that crashed expires TTL after its last
// renewal; its heartbeat expires at about the same time, the others notice
// within one reconcile period (TTL/3) and the new desired owner creates the
// lease. So a crashed node's keys move within TTL + TTL/3 (plus the server's
// expiry scan); a graceful hand-off takes as long as Handler.Release plus a
// few KV round trips.
package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket names and the default TTL.
const (
	NodesBucket  = "mls_nodes"
	LeasesBucket = "mls_leases"
	DefaultTTL   = 3 * time.Second
	// MinTTL keeps the renew period (TTL/3) above a few KV round trips.
	MinTTL = 300 * time.Millisecond
)

// Config of a Manager.
type Config struct {
	Node     string              // this node's name (a KV key: [-/_=.A-Za-z0-9]+)
	Addr     string              // this node's HTTP address, published in its heartbeat
	JS       jetstream.JetStream // the JetStream of this node's connection
	Replicas int                 // of both buckets (1 or 3); default 1
	TTL      time.Duration       // lease and heartbeat lifetime (default 3 s)
	Logger   *slog.Logger        // default slog.Default()
	// Ready, if set, says whether this node may (re)join: a node whose
	// heartbeat lapsed (it was cut off) publishes it again only once Ready,
	// so that it gets keys only when it can serve them.
	Ready func() bool
	// Cores weighs this node's share of the keys (AssignWeighted); 0 or
	// less: GOMAXPROCS.
	Cores int
}

// Handler learns what this node owns. Its calls for one key come in order on
// a goroutine of that key; the Manager's lock is not held, so a handler may
// call Owned and Owners.
type Handler interface {
	// Acquired: this node owns key now, with fencing token token.
	Acquired(key string, token uint64)
	// Release: give key up. Return when done with it (after a last backup);
	// the Manager then deletes the lease.
	Release(key string)
	// Lost: the lease is gone without a Release (renewal failed, another
	// node took it after this node paused): stop work on key at once.
	Lost(key string)
}

// Owner of a lease as seen in the bucket.
type Owner struct {
	Node  string
	Token uint64
	Since time.Time     // when the owner created the lease
	Age   time.Duration // since this node saw the last renewal
}

// NodeInfo of a live node.
type NodeInfo struct {
	Name     string    `json:"name"`
	Addr     string    `json:"addr"`
	Started  time.Time `json:"started"`
	LastSeen time.Time `json:"last_seen"` // server time of its last heartbeat
	// Cores weighs its share of the keys (0: an older node that does not
	// say; then every node weighs the same).
	Cores int `json:"cores,omitempty"`
}

// heartbeat is the value of a node's key in mls_nodes.
type heartbeat struct {
	Node    string    `json:"node"`
	Addr    string    `json:"addr"`
	Started time.Time `json:"started"`
	Cores   int       `json:"cores,omitempty"`
}

// leaseValue is the value of a key in mls_leases. Token 0 (the value
// written by Create, which cannot know its own revision) means the revision
// of the entry.
type leaseValue struct {
	Node  string    `json:"node"`
	Token uint64    `json:"token"`
	Since time.Time `json:"since"`
}

func decodeLease(e entry) leaseValue {
	var v leaseValue
	_ = json.Unmarshal(e.value, &v) // a foreign value decodes to node "": held by nobody we know, left to expire
	if v.Token == 0 {
		v.Token = e.rev
	}
	return v
}

// held is a lease this node holds.
type held struct {
	token      uint64
	rev        uint64    // revision of this node's last write
	since      time.Time // creation
	acquired   time.Time // when the Create reply came
	validUntil time.Time // send time of the last successful write + TTL
	releasing  bool      // Handler.Release was called
	released   bool      // Handler.Release returned: delete the lease
}

// Manager keeps this node's heartbeat and leases. Create it with New.
type Manager struct {
	cfg      Config
	ttl      time.Duration
	h        Handler
	log      *slog.Logger
	nodesKV  jetstream.KeyValue
	leasesKV jetstream.KeyValue
	started  time.Time

	ctx    context.Context // lives until Close or Abort
	cancel context.CancelFunc
	loops  sync.WaitGroup
	events *serial
	// kicks ask a loop to run now; one pending kick is enough.
	kickReconcile, kickWriter chan struct{}

	hbMu   sync.Mutex // a heartbeat Put and the Delete of Close do not cross
	lastHB time.Time  // of the last heartbeat put that succeeded; under hbMu
	// hbAt is lastHB in unix nanoseconds, for the reconcile loop (which
	// holds mu, and may not take hbMu).
	hbAt atomic.Int64

	mu       sync.Mutex
	keys     []string // sorted
	nodes    *view
	leases   *view
	held     map[string]*held
	closing  bool
	stopped  bool
	drained  chan struct{} // closed once closing and nothing is held
	paused   chan struct{} // non-nil while paused by a test
	watchers []jetstream.KeyWatcher
	// badRecords is the revision of the last bad heartbeat logged, by key.
	badRecords map[string]uint64
}

var validKey = regexp.MustCompile(`^[-/_=a-zA-Z0-9]+(\.[-/_=a-zA-Z0-9]+)*$`)

// New opens (creating if needed) the buckets, publishes this node's
// heartbeat, reads both buckets once and starts the heartbeat, renewal,
// watch and reconcile loops. ctx bounds the setup only; transient JetStream
// errors during it are retried until ctx ends.
func New(ctx context.Context, cfg Config, h Handler) (*Manager, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("lease: nil Handler")
	}
	m := &Manager{
		cfg: cfg, ttl: cfg.TTL, h: h, log: cfg.Logger.With("node", cfg.Node),
		started: time.Now(), events: newSerial(),
		kickReconcile: make(chan struct{}, 1), kickWriter: make(chan struct{}, 1),
		held: make(map[string]*held), drained: make(chan struct{}), badRecords: make(map[string]uint64),
		keys: []string{memberKey(cfg.Node)},
	}
	if err := m.openBuckets(ctx); err != nil {
		return nil, err
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if _, err := retry(ctx, setupCallTimeout, m.putHeartbeat); err != nil {
		m.cancel()
		return nil, fmt.Errorf("lease: heartbeat: %w", err)
	}
	m.hbAt.Store(time.Now().UnixNano())
	if err := m.startWatchers(ctx); err != nil {
		m.stop()
		return nil, err
	}
	m.startLoops()
	return m, nil
}

const setupCallTimeout = 2 * time.Second

func (c *Config) fill() error {
	if !validKey.MatchString(c.Node) {
		return fmt.Errorf("lease: node name %q is not a valid KV key ([-/_=.A-Za-z0-9]+, no empty dot-separated parts)", c.Node)
	}
	if c.JS == nil {
		return errors.New("lease: Config.JS is nil")
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Cores <= 0 {
		c.Cores = goruntime.GOMAXPROCS(0)
	}
	if c.TTL < MinTTL {
		return fmt.Errorf("lease: TTL %v below the minimum %v", c.TTL, MinTTL)
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// openBuckets creates the buckets, or opens them when another node did.
// The TTLs that count are the buckets': a node started with another TTL
// follows them (renewing in time) and logs the mismatch. m.ttl, which paces
// heartbeats and renewals, is the shorter of the two.
func (m *Manager) openBuckets(ctx context.Context) error {
	var err error
	var nodesTTL, leasesTTL time.Duration
	if m.nodesKV, nodesTTL, err = m.openBucket(ctx, NodesBucket); err != nil {
		return err
	}
	if m.leasesKV, leasesTTL, err = m.openBucket(ctx, LeasesBucket); err != nil {
		return err
	}
	m.nodes, m.leases = newView(nodesTTL), newView(leasesTTL)
	m.ttl = min(nodesTTL, leasesTTL)
	return nil
}

func (m *Manager) openBucket(ctx context.Context, bucket string) (jetstream.KeyValue, time.Duration, error) {
	kvCfg := jetstream.KeyValueConfig{Bucket: bucket, History: 1, TTL: m.cfg.TTL, Replicas: m.cfg.Replicas}
	kv, err := retry(ctx, setupCallTimeout, func(c context.Context) (jetstream.KeyValue, error) {
		kv, err := m.cfg.JS.CreateKeyValue(c, kvCfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			return m.cfg.JS.KeyValue(c, bucket)
		}
		return kv, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("lease: bucket %s: %w", bucket, err)
	}
	st, err := retry(ctx, setupCallTimeout, kv.Status)
	if err != nil {
		return nil, 0, fmt.Errorf("lease: bucket %s: %w", bucket, err)
	}
	ttl := st.TTL()
	if ttl < MinTTL {
		return nil, 0, fmt.Errorf("lease: bucket %s exists with TTL %v; it needs one of at least %v (delete the bucket while no node runs)", bucket, ttl, MinTTL)
	}
	if ttl != m.cfg.TTL {
		m.log.Warn("lease: bucket exists with another TTL; following the bucket", "bucket", bucket, "bucket_ttl", ttl, "configured_ttl", m.cfg.TTL)
	}
	return kv, ttl, nil
}

// SetKeys sets the full set of keys that someone should own. Keys that are
// not valid KV keys are logged and left out.
func (m *Manager) SetKeys(keys []string) {
	keys = sortedUnique(append(workKeys(keys), memberKey(m.cfg.Node)))
	keys = slices.DeleteFunc(keys, func(k string) bool {
		if validKey.MatchString(k) {
			return false
		}
		m.log.Error("lease: key is not a valid KV key; nobody will own it", "key", k)
		return true
	})
	m.mu.Lock()
	m.keys = keys
	m.mu.Unlock()
	kick(m.kickReconcile)
}

// Owned returns the keys this node holds now, with their tokens. A lease
// whose last renewal is older than the TTL is not shown even before the
// node learns it is lost, nor one whose Release has returned.
func (m *Manager) Owned() map[string]uint64 {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]uint64, len(m.held))
	for k, hk := range m.held {
		if now.Before(hk.validUntil) && !hk.released && !IsMemberKey(k) {
			out[k] = hk.token
		}
	}
	return out
}

// Owners returns every lease in the bucket as this node last saw it.
func (m *Manager) Owners() map[string]Owner {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Owner, len(m.leases.m))
	for k, e := range m.leases.m {
		if now.Sub(e.seen) > m.leases.ttl || IsMemberKey(k) {
			continue
		}
		v := decodeLease(e)
		out[k] = Owner{Node: v.Node, Token: v.Token, Since: v.Since, Age: now.Sub(e.seen)}
	}
	return out
}

// Nodes returns the live nodes, sorted by name.
func (m *Manager) Nodes() []NodeInfo {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	members := m.membersLocked(now)
	out := make([]NodeInfo, 0, len(members))
	for name, hb := range members {
		out = append(out, NodeInfo{Name: name, Addr: hb.Addr, Started: hb.Started, LastSeen: m.nodes.m[name].created, Cores: hb.Cores})
	}
	slices.SortFunc(out, func(a, b NodeInfo) int { return cmpString(a.Name, b.Name) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// HeartbeatAge is how long ago this node's last heartbeat was stored: past
// the TTL, the node is cut off from the cluster (or its bucket has no
// leader), and what it knows of the others is that old.
func (m *Manager) HeartbeatAge() time.Duration {
	return time.Since(time.Unix(0, m.hbAt.Load()))
}

// TTL is the TTL in force: the shorter of the two buckets'.
func (m *Manager) TTL() time.Duration { return m.ttl }

// Close leaves gracefully: it deletes the heartbeat (so the others stop
// counting this node and pick the keys' next owners), then releases every
// held key (Handler.Release, then the lease is deleted, and the next owner
// creates it at once). If ctx ends first, Close stops like Abort.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.stopped || m.closing {
		m.mu.Unlock()
		return errors.New("lease: Manager already closed")
	}
	m.closing = true
	m.noteDrainedLocked()
	m.mu.Unlock()
	if err := m.deleteHeartbeat(ctx); err != nil {
		m.Abort()
		return fmt.Errorf("lease: close: deleting heartbeat: %w", err)
	}
	kick(m.kickReconcile)
	select {
	case <-m.drained:
	case <-ctx.Done():
		m.Abort()
		return fmt.Errorf("lease: close: releasing keys: %w", ctx.Err())
	}
	m.stop()
	return nil
}

// deleteHeartbeat waits for a heartbeat in flight (which would undo the
// delete) and deletes this node's key; closing keeps further ones off.
func (m *Manager) deleteHeartbeat(ctx context.Context) error {
	m.hbMu.Lock()
	defer m.hbMu.Unlock()
	_, err := retry(ctx, setupCallTimeout, func(c context.Context) (struct{}, error) {
		return struct{}{}, m.nodesKV.Delete(c, m.cfg.Node)
	})
	return err
}

// Abort stops without releasing, as a crash would: no more heartbeats,
// renewals or handler calls; the leases expire after the TTL.
func (m *Manager) Abort() { m.stop() }

func (m *Manager) stop() {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	m.stopped = true
	ws := m.watchers
	m.mu.Unlock()
	m.cancel()
	for _, w := range ws {
		_ = w.Stop()
	}
	m.loops.Wait()
}

func (m *Manager) isStopped() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stopped
}

// noteDrainedLocked wakes Close once nothing is held.
func (m *Manager) noteDrainedLocked() {
	if m.closing && len(m.held) == 0 {
		select {
		case <-m.drained:
		default:
			close(m.drained)
		}
	}
}

// emit queues a handler call for key; calls after a stop are dropped.
func (m *Manager) emit(key string, f func()) {
	m.events.do(key, func() {
		if !m.isStopped() {
			f()
		}
	})
}

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
