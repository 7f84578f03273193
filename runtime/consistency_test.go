package runtime

import (
	"math"
	"testing"
	"time"

	"github.com/mlstream/mlstream/internal/gen"
)

// The paper's Experiment 9: async, bsp and ssp reach the same accuracy on
// the same stream; bsp and ssp keep the partitions' rounds within their
// staleness while both are busy.
func TestConsistencyModelsReachTheSameAccuracy(t *testing.T) {
	g := gen.New(gen.Config{Seed: 3})
	lines := make([]string, 60_000)
	for i := range lines {
		ev := g.Next()
		lines[i] = string(ev.AppendJSON(nil))
	}
	acc := map[string]float64{}
	for _, model := range []string{ConsistencyAsync, ConsistencyBSP, ConsistencySSP} {
		e := testEngine(t, Config{})
		j := mustPut(t, e, Spec{Name: "m", Kind: "logreg", Input: "s", Partitions: 2,
			Params: map[string]any{"hash_bits": 18}, Sync: SyncSpec{Consistency: model}})
		for i := 0; i < len(lines); i += 200 {
			if _, err := ingest(e, "s", lines[i:i+200]...); err != nil {
				t.Fatal(err)
			}
		}
		waitIdle(t, j)
		deadline := time.Now().Add(10 * time.Second)
		st := j.Status(false)
		for sec(st).Metrics.All.Count != int64(len(lines)) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
			st = j.Status(false)
		}
		if sec(st).Metrics.All.Count != int64(len(lines)) {
			t.Fatalf("%s: learned %d of %d", model, sec(st).Metrics.All.Count, len(lines))
		}
		c := sec(st).Consistency
		if c == nil || c.Model != model || c.MaxRound == 0 {
			t.Fatalf("%s: consistency %+v", model, c)
		}
		acc[model] = sec(st).Metrics.All.Accuracy
		t.Logf("%s: accuracy %.4f, rounds %d-%d, %d waits (%.1f ms), model version %d", model, sec(st).Metrics.All.Accuracy, c.MinRound, c.MaxRound, c.Waits, c.WaitedMs, sec(st).Model.Version)
	}
	for _, m := range []string{ConsistencyBSP, ConsistencySSP} {
		if math.Abs(acc[m]-acc[ConsistencyAsync]) > 0.01 {
			t.Fatalf("%s accuracy %.4f, async %.4f: more than a point apart", m, acc[m], acc[ConsistencyAsync])
		}
	}
}

// Under bsp a busy partition never runs a round ahead of another busy one.
func TestBSPKeepsRoundsTogether(t *testing.T) {
	c := NewSyncClock(2, 0)
	c.SetActive(0, true)
	c.SetActive(1, true)
	done := make(chan struct{})
	go func() {
		c.Advance(0) // round 1: must wait for partition 1
		close(done)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for c.Status("bsp").Waits == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-done:
		t.Fatal("partition 0 went on while partition 1 had not merged round 1")
	default:
	}
	if c.Status("bsp").Waits != 1 {
		t.Fatal("partition 0 never waited")
	}
	c.Advance(1)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("partition 0 still waits after partition 1 merged")
	}
	// An idle partition holds no one back, and rejoins at the front.
	c.SetActive(1, false)
	c.Advance(0)
	c.Advance(0)
	c.SetActive(1, true)
	if st := c.Status("bsp"); st.MinRound != 3 || st.MaxRound != 3 || st.Waits != 1 {
		t.Fatalf("status %+v", st)
	}
}

// mustWaitFor checks that partition 0's next Advance waits (the clock's
// waits reach waits) until report, another node's report of partition 1,
// comes, and returns once it came.
func mustWaitFor(t *testing.T, c *SyncClock, waits uint64, report func(), what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		c.Advance(0)
		close(done)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for c.Status("bsp").Waits < waits {
		if time.Now().After(deadline) {
			t.Fatalf("%s: never %d waits: %+v", what, waits, c.Status("bsp"))
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-done:
		t.Fatalf("%s: partition 0 went on", what)
	default:
	}
	report()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: partition 0 still waits after the report", what)
	}
}

// Under bsp a local partition waits for a busy remote one (another node's,
// as its deltas report it) until the remote one reports the same round;
// the wait counts as a remote wait.
func TestBSPWaitsForRemotePartitions(t *testing.T) {
	c := NewSyncClock(2, 0)
	c.SetActive(0, true)
	c.Observe(1, 0, true)
	mustWaitFor(t, c, 1, func() { c.Observe(1, 1, true) }, "round 1 before remote partition 1 merged it")
	if st := c.Status("bsp"); st.Waits != 1 || st.RemoteWaits != 1 || st.MinRound != 1 || st.MaxRound != 1 {
		t.Fatalf("status %+v", st)
	}
	// A remote partition that went idle holds no one back.
	c.Observe(1, 1, false)
	c.Advance(0)
	c.Advance(0)
	if st := c.Status("bsp"); st.Waits != 1 || st.MaxRound != 3 {
		t.Fatalf("waited for an idle remote partition: %+v", st)
	}
}

// Under ssp a local partition runs up to staleness rounds ahead of a busy
// remote one, and no further.
func TestSSPBoundsTheGapToRemotePartitions(t *testing.T) {
	c := NewSyncClock(2, 2)
	c.SetActive(0, true)
	c.Observe(1, 0, true)
	c.Advance(0)
	c.Advance(0)
	// Round 3 is more than 2 ahead of round 0, not of round 1.
	mustWaitFor(t, c, 1, func() { c.Observe(1, 1, true) }, "3 rounds ahead under staleness 2")
}

// A remote partition nothing came from for the silence counts as idle:
// its dead owner holds no one back for longer; when it reports again it
// is waited for again.
func TestSilentRemotePartitionCountsAsIdle(t *testing.T) {
	c := NewSyncClock(2, 0)
	c.SetSilence(100 * time.Millisecond)
	c.SetActive(0, true)
	c.Observe(1, 0, true)
	start := time.Now()
	c.Advance(0)
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Fatalf("went on after %v, before the silence", took)
	}
	if st := c.Status("bsp"); st.RemoteSilent != 1 || st.RemoteWaits != 1 {
		t.Fatalf("status %+v", st)
	}
	c.SetSilence(time.Hour)
	c.Observe(1, 0, true)
	mustWaitFor(t, c, 2, func() { c.Observe(1, 2, true) }, "a remote partition that reported again")
}

// A partition run here ignores reports of it (its own deltas, or an old
// owner's late ones); one taken over from another node joins at the
// fastest round, as an idle one does.
func TestTakenOverPartitionJoinsAtTheFastest(t *testing.T) {
	c := NewSyncClock(3, 0)
	c.SetActive(0, true)
	c.Observe(1, 5, false)
	c.Observe(2, 2, true) // another node runs 2, two rounds behind
	c.SetActive(2, true)  // ... until it is taken over here
	if r := c.Round(2); r != 5 {
		t.Fatalf("taken over at round %d, want the fastest, 5", r)
	}
	c.Observe(2, 1, true)
	if r := c.Round(2); r != 5 {
		t.Fatalf("a report of a partition busy here moved it to round %d", r)
	}
	// Partition 0 (round 0) must catch up before anyone waits for it;
	// 1 is idle, 2 is local at 5: partition 0 never waits.
	for range 5 {
		c.Advance(0)
	}
	if st := c.Status("bsp"); st.Waits != 0 || st.RemoteWaits != 0 {
		t.Fatalf("status %+v", st)
	}
}

// Under async nothing waits, whatever remote partitions report.
func TestAsyncIgnoresRemoteRounds(t *testing.T) {
	c := NewSyncClock(2, math.MaxInt32)
	c.SetActive(0, true)
	c.Observe(1, 0, true)
	for range 100 {
		c.Advance(0)
	}
	if st := c.Status("async"); st.Waits != 0 || st.MaxRound != 100 {
		t.Fatalf("status %+v", st)
	}
}
