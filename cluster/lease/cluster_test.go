package lease

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// testTTL is the tests' lease TTL: short, so that expiries come soon,
// but renewals every TTL/3 must still get a core in time under -race on
// a loaded 2-core machine (at 600 ms, live nodes lost leases at load 12).
const testTTL = time.Second

// pause freezes every loop of m, as a stopped process would be.
func (m *Manager) pause() {
	m.mu.Lock()
	m.paused = make(chan struct{})
	m.mu.Unlock()
}

func (m *Manager) resume() {
	m.mu.Lock()
	close(m.paused)
	m.paused = nil
	m.mu.Unlock()
}

type event struct {
	node, kind, key string
	token           uint64
}

// journal records the handler calls of every node in one order.
type journal struct {
	mu     sync.Mutex
	events []event
}

func (j *journal) add(e event) {
	j.mu.Lock()
	j.events = append(j.events, e)
	j.mu.Unlock()
}

func (j *journal) snapshot() []event {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.events)
}

func (j *journal) count(node, kind string) int {
	n := 0
	for _, e := range j.snapshot() {
		if e.node == node && e.kind == kind {
			n++
		}
	}
	return n
}

type recorder struct {
	node string
	j    *journal
	m    func() *Manager
}

func (r *recorder) Acquired(key string, token uint64) {
	r.j.add(event{r.node, "acquired", key, token})
}

func (r *recorder) Release(key string) {
	// The owner still holds the key while it takes its last backup.
	if _, ok := r.m().Owned()[key]; !ok {
		r.j.add(event{r.node, "release-not-owned", key, 0})
	}
	r.j.add(event{r.node, "release", key, 0})
}

func (r *recorder) Lost(key string) { r.j.add(event{r.node, "lost", key, 0}) }

// testCluster is one embedded nats-server with JetStream and Managers on
// their own connections playing the nodes.
type testCluster struct {
	t *testing.T
	s *server.Server
	j *journal

	mu         sync.Mutex
	keys       []string
	keysSet    bool
	ms         map[string]*Manager
	violations []string
}

func newTestCluster(t *testing.T, keys []string) *testCluster {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		JetStream: true, StoreDir: t.TempDir(), Port: -1, NoSigs: true,
		JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 256 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	c := &testCluster{t: t, s: s, j: &journal{}, keys: keys, ms: make(map[string]*Manager)}
	c.watchOverlaps()
	return c
}

// add starts a node named name holding the cluster's keys.
func (c *testCluster) add(name string) *Manager {
	c.t.Helper()
	return c.addWithTTL(name, testTTL)
}

func (c *testCluster) addWithTTL(name string, ttl time.Duration) *Manager {
	c.t.Helper()
	js := c.connect()
	var m *Manager
	rec := &recorder{node: name, j: c.j, m: func() *Manager { return m }}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.Default()
	}
	var err error
	m, err = New(ctx, Config{Node: name, Addr: "http://" + name, JS: js, TTL: ttl, Logger: log}, rec)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(m.Abort)
	c.mu.Lock()
	c.ms[name] = m
	if c.keysSet {
		m.SetKeys(c.keys)
	}
	c.mu.Unlock()
	return m
}

// start adds nodes, waits until each sees all, then gives them the keys (so
// that the first node does not take every key and hand most of them on).
func (c *testCluster) start(names ...string) {
	c.t.Helper()
	for _, n := range names {
		c.add(n)
	}
	eventually(c.t, 5*time.Second, "every node to see every node", func() bool {
		for _, m := range c.managers() {
			if len(m.Nodes()) != len(names) {
				return false
			}
		}
		return true
	})
	c.setKeys(c.currentKeys())
}

func (c *testCluster) setKeys(keys []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys, c.keysSet = keys, true
	for _, m := range c.ms {
		m.SetKeys(keys)
	}
}

// remove forgets a node that was closed or aborted.
func (c *testCluster) remove(name string) {
	c.mu.Lock()
	delete(c.ms, name)
	c.mu.Unlock()
}

func (c *testCluster) currentKeys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.keys
}

func (c *testCluster) managers() map[string]*Manager {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]*Manager, len(c.ms))
	for k, v := range c.ms {
		out[k] = v
	}
	return out
}

// watchOverlaps checks, every millisecond of the test, that no two nodes
// hold a key at once: when two nodes list a key, the older lease's validity
// must have ended before the newer one was created. It also checks every
// node's Owned against the bucket (read first: a key the bucket shows held
// by a newer lease must not be Owned under an older one afterwards).
func (c *testCluster) watchOverlaps() {
	kv := c.bucketReader()
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-t.C:
			}
			v := overlaps(c.managers())
			if v == "" && i%10 == 0 {
				v = c.ownedAgainstBucket(kv)
			}
			if v != "" {
				c.mu.Lock()
				c.violations = append(c.violations, v)
				c.mu.Unlock()
			}
		}
	}()
	c.t.Cleanup(func() {
		close(done)
		<-finished
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, v := range c.violations[:min(len(c.violations), 5)] {
			c.t.Error(v)
		}
	})
}

// connect opens a connection of its own over TCP, as a node would.
func (c *testCluster) connect() jetstream.JetStream {
	c.t.Helper()
	nc, err := nats.Connect(c.s.ClientURL())
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		c.t.Fatal(err)
	}
	return js
}

// bucketReader opens mls_leases on a connection of the test's own.
func (c *testCluster) bucketReader() jetstream.KeyValue {
	c.t.Helper()
	js := c.connect()
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: LeasesBucket, History: 1, TTL: testTTL})
	if err != nil {
		c.t.Fatal(err)
	}
	return kv
}

func (c *testCluster) ownedAgainstBucket(kv jetstream.KeyValue) string {
	inBucket := make(map[string]leaseValue)
	for _, k := range c.currentKeys() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		e, err := kv.Get(ctx, k)
		cancel()
		if err == nil {
			inBucket[k] = decodeLease(entry{rev: e.Revision(), value: e.Value()})
		}
	}
	// The nodes after the read: a node that crashed (Abort) and came back
	// under its name is the new one by the time the bucket shows its lease.
	ms := c.managers()
	for name, m := range ms {
		for k, tok := range m.Owned() {
			v, ok := inBucket[k]
			// A lease newer than this node's (a larger token) was already
			// there: this node's validity must have ended. (A smaller one
			// is the previous owner's: this node took over since the read.)
			if ok && ms[v.Node] != nil && (v.Token > tok || v.Token == tok && v.Node != name) {
				return fmt.Sprintf("%s lists %s (token %d) as owned after the bucket showed it held by %s (token %d)", name, k, tok, v.Node, v.Token)
			}
		}
	}
	return ""
}

type holding struct {
	node               string
	token              uint64
	validUntil, gotten time.Time
}

func overlaps(ms map[string]*Manager) string {
	byKey := make(map[string][]holding)
	for name, m := range ms {
		m.mu.Lock()
		for k, hk := range m.held {
			if !hk.released {
				byKey[k] = append(byKey[k], holding{name, hk.token, hk.validUntil, hk.acquired})
			}
		}
		m.mu.Unlock()
	}
	for k, hs := range byKey {
		sort.Slice(hs, func(i, j int) bool { return hs[i].token < hs[j].token })
		for i := 1; i < len(hs); i++ {
			older, newer := hs[i-1], hs[i]
			if older.token == newer.token || older.validUntil.After(newer.gotten) {
				return fmt.Sprintf("key %s held by %s (token %d, valid until %s) and %s (token %d, acquired %s)",
					k, older.node, older.token, older.validUntil.Format(time.StampMicro),
					newer.node, newer.token, newer.gotten.Format(time.StampMicro))
			}
		}
	}
	return ""
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// ownership returns node → owned keys → token over the given managers, and
// whether every key of keys is owned by exactly one of them.
func ownership(ms map[string]*Manager, keys []string) (map[string]map[string]uint64, bool) {
	out := make(map[string]map[string]uint64)
	owners := make(map[string]int)
	for name, m := range ms {
		out[name] = m.Owned()
		for k := range out[name] {
			owners[k]++
		}
	}
	if len(owners) != len(keys) {
		return out, false
	}
	for _, k := range keys {
		if owners[k] != 1 {
			return out, false
		}
	}
	return out, true
}

// waitBalanced waits until every key is owned exactly once, each node
// owns per keys, and the journal holds every owner's Acquired call of its
// keys: Acquired runs on its own goroutine, after Owned shows the key, so
// a test that marks the journal here would otherwise see it land later.
func (c *testCluster) waitBalanced(timeout time.Duration, per int) map[string]map[string]uint64 {
	c.t.Helper()
	var own map[string]map[string]uint64
	eventually(c.t, timeout, fmt.Sprintf("%d keys on each node", per), func() bool {
		var ok bool
		own, ok = ownership(c.managers(), c.currentKeys())
		if !ok {
			return false
		}
		for _, ks := range own {
			if len(ks) != per {
				return false
			}
		}
		return journaled(c.j.snapshot(), own)
	})
	return own
}

// journaled says whether events hold an Acquired call of every owned key
// by its owner with its token.
func journaled(events []event, own map[string]map[string]uint64) bool {
	for node, ks := range own {
		for k, token := range ks {
			if !slices.Contains(events, event{node, "acquired", k, token}) {
				return false
			}
		}
	}
	return true
}

func testKeys() []string {
	var keys []string
	for _, job := range []string{"clicks", "views", "buys"} {
		keys = append(keys, job+".global")
		for p := range 3 {
			keys = append(keys, fmt.Sprintf("%s.p%d", job, p))
		}
	}
	return keys
}

func ownerOf(own map[string]map[string]uint64, key string) (string, uint64) {
	for n, ks := range own {
		if tok, ok := ks[key]; ok {
			return n, tok
		}
	}
	return "", 0
}

// firstIndex is the position of the first matching event, -1 if none.
func firstIndex(events []event, node, kind, key string) int {
	return slices.IndexFunc(events, func(e event) bool { return e.node == node && e.kind == kind && e.key == key })
}

func TestThreeNodesShareKeysEvenly(t *testing.T) {
	c := newTestCluster(t, testKeys())
	c.start("a", "b", "c")
	own := c.waitBalanced(10*time.Second, 4)

	tokens := make(map[uint64]string)
	for n, ks := range own {
		for k, tok := range ks {
			if other, dup := tokens[tok]; dup {
				t.Errorf("token %d of %s on %s is also the token of %s", tok, k, n, other)
			}
			tokens[tok] = k
		}
	}
	// The leases are renewed, yet the tokens stay.
	m := c.managers()["a"]
	key := slices.Sorted(maps.Keys(own["a"]))[0]
	start := validUntil(m, key)
	eventually(t, 5*time.Second, "renewals for more than a TTL", func() bool {
		return validUntil(m, key).Sub(start) > 2*testTTL
	})
	after, ok := ownership(c.managers(), c.currentKeys())
	if !ok {
		t.Fatalf("ownership not exclusive after renewals: %v", after)
	}
	for n := range own {
		if !maps.Equal(own[n], after[n]) {
			t.Errorf("node %s: owned %v, after renewals %v", n, own[n], after[n])
		}
	}
	// Every node sees every lease with its owner and token.
	for n, mm := range c.managers() {
		owners := mm.Owners()
		for k := range own[n] {
			if o := owners[k]; o.Node != n || o.Token != own[n][k] {
				t.Errorf("Owners()[%s] = %+v on %s, want node %s token %d", k, o, n, n, own[n][k])
			}
		}
		if nodes := mm.Nodes(); len(nodes) != 3 || nodes[0].Name != "a" || nodes[0].Addr != "http://a" {
			t.Errorf("Nodes() on %s = %+v", n, nodes)
		}
	}
	for _, e := range c.j.snapshot() {
		if e.kind != "acquired" {
			t.Errorf("unexpected handler call %+v", e)
		}
	}
	if n := len(c.j.snapshot()); n != len(c.keys) {
		t.Errorf("%d Acquired calls for %d keys", n, len(c.keys))
	}
}

func validUntil(m *Manager, key string) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if hk := m.held[key]; hk != nil {
		return hk.validUntil
	}
	return time.Time{}
}
