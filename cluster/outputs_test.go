package cluster

import (
	"context"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mlstream/mlstream/cluster/lease"
	"github.com/mlstream/mlstream/runtime"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// typeMatch is the join kind's match message type (the kinds import
// runtime, not cluster).
const typeMatch = "match"

// testNATS runs a core NATS server for the test.
func testNATS(t *testing.T) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{Port: -1, NoSigs: true})
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
	return s.ClientURL()
}

// outputsNode is a node with just what outputs and rates use: a NATS
// connection, an engine (its hub) and the job states, whose partitions
// the test owns by hand.
func outputsNode(t *testing.T, url, name string, jobs ...*jobState) *Node {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	n := &Node{cfg: Config{Node: name}, nc: nc, log: log, engine: runtime.NewEngine(runtime.Config{Logger: log})}
	n.mu.jobs = map[string]*jobState{}
	for _, st := range jobs {
		st.n = n
		n.mu.jobs[st.name()] = st
	}
	n.out = newOutputs(n)
	if err := n.out.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.out.stop()
		_ = n.engine.Close(context.Background())
		nc.Close()
	})
	return n
}

// testJob is job name's state with parts partitions, none owned.
func testJob(name string, parts int) *jobState {
	st := &jobState{spec: runtime.Spec{Name: name}}
	for p := range parts {
		st.parts = append(st.parts, newPartState(st, p))
	}
	return st
}

func (ps *partState) ownFor(token uint64) {
	ps.token.Store(token)
	ps.owned.Store(true)
}

// waitFor polls cond until it holds or 10 s passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Node a publishes outputs of two partitions it owns; node b knows a newer
// owner token for partition 1 (from its lease view): b's client gets
// partition 0's output, with a's token, and not partition 1's, which b
// counts as stale. A partition a does not own reaches nobody.
func TestOutputsFencedByOwnerToken(t *testing.T) {
	url := testNATS(t)
	ja := testJob("j", 3)
	ja.parts[0].ownFor(9)
	ja.parts[1].ownFor(4)
	a := outputsNode(t, url, "a", ja)
	b := outputsNode(t, url, "b", testJob("j", 3))
	b.out.fence.learn(map[string]lease.Owner{leaseKey("j", 1): {Node: "c", Token: 6}}, map[string]bool{"j": true})

	sub := b.engine.Hub().Subscribe([]string{"j"}, []string{typeMatch}, 10)
	local := a.engine.Hub().Subscribe([]string{"j"}, []string{typeMatch}, 10)
	waitFor(t, "a to learn b's wants", func() bool { return a.out.RemoteWants("j", typeMatch) })

	hub := a.engine.Hub()
	hub.PublishFrom("j", typeMatch, 2, []byte("p2")) // not owned
	hub.PublishFrom("j", typeMatch, 0, []byte("p0"))
	hub.PublishFrom("j", typeMatch, 1, []byte("p1"))
	waitFor(t, "b to drop partition 1's output", func() bool { return b.stats.staleOutputs.Load() == 1 })
	if len(sub.C) != 1 {
		t.Fatalf("b's client got %d outputs, want 1 (partition 0's)", len(sub.C))
	}
	if m := <-sub.C; string(m) != "p0" {
		t.Fatalf("b's client got %q, want p0", m)
	}
	if got := a.stats.unownedOutputs.Load(); got != 1 {
		t.Fatalf("a counted %d unowned outputs, want 1", got)
	}
	if got := a.stats.forwarded.Load(); got != 2 {
		t.Fatalf("a forwarded %d outputs, want 2 (partitions 0 and 1)", got)
	}
	if got := len(local.C); got != 2 {
		t.Fatalf("a's own client got %d outputs, want 2", got)
	}
	// b saw token 9 for partition 0: an output under an older token of
	// partition 0 is now stale too, a newer one passes.
	if b.out.fence.admit(partKey{"j", 0}, 8) || !b.out.fence.admit(partKey{"j", 0}, 10) {
		t.Fatal("b's fence for partition 0 did not follow the token it received")
	}
}

// An owner that learns of a newer token for its partition (it was paused
// past its lease) keeps the partition's outputs from its own clients and
// from the other nodes.
func TestOutputsOfAFencedOwnerStayHome(t *testing.T) {
	url := testNATS(t)
	ja := testJob("j", 1)
	ja.parts[0].ownFor(5)
	a := outputsNode(t, url, "a", ja)
	local := a.engine.Hub().Subscribe([]string{"j"}, []string{typeMatch}, 10)
	a.engine.Hub().PublishFrom("j", typeMatch, 0, []byte("before"))
	a.out.fence.learn(map[string]lease.Owner{leaseKey("j", 0): {Node: "b", Token: 7}}, map[string]bool{"j": true})
	a.engine.Hub().PublishFrom("j", typeMatch, 0, []byte("after"))
	if len(local.C) != 1 || string(<-local.C) != "before" {
		t.Fatal("the fenced owner's client got its output")
	}
	if got := a.stats.staleOutputs.Load(); got != 1 {
		t.Fatalf("stale outputs %d, want 1", got)
	}
	if s := a.counts(); s.StaleOutputs != 1 {
		t.Fatalf("counts %+v, want stale_outputs 1", s)
	}
	// Job-level messages are no partition's: they pass.
	a.engine.Hub().Publish("j", typeMatch, []byte("job"))
	if len(local.C) != 1 {
		t.Fatal("a job-level message did not reach the client")
	}
}

func TestFenceMarks(t *testing.T) {
	f := newFence()
	k := partKey{"j", 0}
	if !f.admit(k, 3) || !f.current(k, 3) {
		t.Fatal("a first token is current")
	}
	if f.admit(k, 2) || f.current(k, 2) {
		t.Fatal("an older token passed")
	}
	f.learn(map[string]lease.Owner{leaseKey("j", 0): {Token: 8}, leaseKey("gone", 0): {Token: 1}}, map[string]bool{"j": true})
	if f.admit(k, 7) || !f.admit(k, 8) {
		t.Fatal("the lease view's token is not the mark")
	}
	f.learn(nil, map[string]bool{})
	if !f.admit(k, 1) {
		t.Fatal("a deleted job's marks were kept")
	}
}

// An output under a forged token (the largest there is) does not keep
// the real owner's outputs out for longer than claimTTL: the token is only
// a claim, which the lease view never confirms. Meanwhile it fences the
// real owner as it would an old one, on every node that received it (the
// owner's own, too).
func TestOutputsForgedMaxTokenDoesNotWedge(t *testing.T) {
	url := testNATS(t)
	ja := testJob("j", 1)
	ja.parts[0].ownFor(9)
	a := outputsNode(t, url, "a", ja)
	b := outputsNode(t, url, "b", testJob("j", 1))
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	view := map[string]lease.Owner{leaseKey("j", 0): {Node: "a", Token: 9}}
	for _, n := range []*Node{a, b} {
		n.out.fence.mu.Lock()
		n.out.fence.now = func() time.Time { return time.Unix(0, clock.Load()) }
		n.out.fence.mu.Unlock()
		n.out.fence.learn(view, map[string]bool{"j": true})
	}
	sub := b.engine.Hub().Subscribe([]string{"j"}, []string{typeMatch}, 10)
	waitFor(t, "a to learn b's wants", func() bool { return a.out.RemoteWants("j", typeMatch) })

	rogue, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	m := nats.NewMsg(outSubject + ".rogue")
	m.Header.Set(hdrJob, "j")
	m.Header.Set(hdrType, typeMatch)
	m.Header.Set(hdrPart, "0")
	m.Header.Set(hdrToken, strconv.FormatUint(math.MaxUint64, 10))
	m.Data = []byte("forged")
	if err := rogue.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b to take the forged output", func() bool { return len(sub.C) == 1 })
	<-sub.C
	waitFor(t, "a to see the forged claim", func() bool { return !a.out.fence.current(partKey{"j", 0}, 9) })
	a.engine.Hub().PublishFrom("j", typeMatch, 0, []byte("held"))
	if got := a.stats.staleOutputs.Load(); got != 1 {
		t.Fatalf("a's stale outputs %d, want 1 under the claim", got)
	}

	clock.Add(int64(claimTTL))
	for _, n := range []*Node{a, b} {
		n.out.fence.learn(view, map[string]bool{"j": true})
	}
	a.engine.Hub().PublishFrom("j", typeMatch, 0, []byte("real"))
	waitFor(t, "the real owner's output to reach b's client", func() bool { return len(sub.C) == 1 })
	if got := string(<-sub.C); got != "real" {
		t.Fatalf("b's client got %q, want the real owner's output", got)
	}
}
