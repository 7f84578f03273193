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
