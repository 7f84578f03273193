package kindtest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/kinds/kindtest"
	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// The autoscaler against partitions of a known true rate (R = 2000
// events per busy second, kind throttled), under a step up and a step
// down of the input rate. Its decisions are ticked by the test at a
// simulated time (a tick every 250ms), after the tick's events were all
// processed: with target utilization 0.7, 2000 events/s need
// ceil(2000/1400) = 2 partitions and 5880 events/s ceil(4.2) = 5 (a true
// rate measured up to 15% low, as on a loaded machine, still gives 5). It
// reaches each count within two decisions of the step, and then holds:
// no decision ever goes back.
func TestAutoscalerFollowsSteps(t *testing.T) {
	prev := goruntime.GOMAXPROCS(8) // the autoscaler never passes GOMAXPROCS
	t.Cleanup(func() { goruntime.GOMAXPROCS(prev) })
	e := runtime.NewEngine(runtime.Config{Partitions: 1, AutoscaleInterval: -1, IngestWait: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	spec := runtime.Spec{Name: "th", Kind: kindtest.Throttled, Input: "s", Params: map[string]any{"rate": 2000},
		Autoscale: &runtime.AutoscaleSpec{Min: 1, Max: 8, TargetUtilization: 0.7, Cooldown: "250ms"}}
	if _, err := e.PutJob(spec); err != nil {
		t.Fatal(err)
	}
	const tick = 250 * time.Millisecond
	now := time.Unix(1_700_000_000, 0)
	sent := 0
	// step sends a tick's events (rates in events per simulated second,
	// the first for the first half of the tick), waits for them to be
	// processed, and has the autoscaler decide.
	step := func(rate1, rate2 int) runtime.AutoscaleDecision {
		t.Helper()
		for _, r := range []int{rate1, rate2} {
			n := r * int(tick/time.Millisecond) / 2 / 1000
			sendEvents(t, e, sent, n)
			sent += n
		}
		waitCounted(t, e, "th", sent)
		now = now.Add(tick)
		d, err := e.AutoscaleTick(context.Background(), "th", now)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s %d→%d input %.0f/s true %.0f/s: %s %s", d.Action, d.Partitions, d.Target, d.InputRate, d.TrueRate, d.Reason, d.Error)
		if d.Error != "" {
			t.Fatalf("decision failed: %s", d.Error)
		}
		return d
	}
	step(0, 0) // the first measure
	for _, phase := range []struct {
		name         string
		first, later int // input of the step's first tick (a step mid-tick), then of the others
		want         int
	}{
		{"start", 2000, 2000, 2},
		{"step up", 5880, 5880, 5},
		{"step down, mid-tick", 5880, 2000, 2},
	} {
		var got []int
		for i := range 6 {
			r1, r2 := phase.later, phase.later
			if i == 0 {
				r1 = phase.first
			}
			got = append(got, step(r1, r2).Target)
		}
		reached := -1
		for i, n := range got {
			if n == phase.want {
				reached = i
				break
			}
		}
		if reached < 0 || reached > 1 {
			t.Fatalf("%s: partitions %v, want %d within 2 decisions", phase.name, got, phase.want)
		}
		for _, n := range got[reached:] {
			if n != phase.want {
				t.Fatalf("%s: partitions %v: it did not hold %d", phase.name, got, phase.want)
			}
		}
	}
	j, err := e.Job("th")
	if err != nil {
		t.Fatal(err)
	}
	st := j.Status(false)
	if st.Processed != uint64(sent) || st.Elastic.Autoscale == nil || len(st.Elastic.Autoscale.Decisions) == 0 || st.Elastic.Rescales < 3 {
		t.Fatalf("status after the steps: processed %d of %d, elastic %+v", st.Processed, sent, st.Elastic)
	}
	last := st.Elastic.Last[len(st.Elastic.Last)-1]
	if last.Decision == nil || !strings.HasPrefix(last.Reason, "autoscale down") {
		t.Fatalf("the last rescale %+v does not carry the autoscaler's decision", last)
	}
}

// sendEvents ingests n events of stream s, keys from first on, in
// requests of 100.
func sendEvents(t *testing.T, e *runtime.Engine, first, n int) {
	t.Helper()
	var p fastjson.Parser
	for done := 0; done < n; {
		b, err := e.NewBatch("s")
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100 && done < n; i++ {
			v, err := p.Parse(fmt.Sprintf(`{"key":"k%d"}`, first+done))
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Add(v, i+1); err != nil {
				t.Fatal(err)
			}
			done++
		}
		if _, err := b.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// waitCounted polls until the job counted n events.
func waitCounted(t *testing.T, e *runtime.Engine, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		j, err := e.Job(name)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status(false).Processed == uint64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processed %d events, want %d", j.Status(false).Processed, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A kind that cannot move its state (kind count of count_test.go) takes
// no autoscale section: a 400 naming it, not an autoscaler that fails.
func TestAutoscaleNeedsARescalableKind(t *testing.T) {
	e := runtime.NewEngine(runtime.Config{Partitions: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	_, err := e.PutJob(runtime.Spec{Name: "c", Kind: "count", Input: "s", Autoscale: &runtime.AutoscaleSpec{Max: 2}})
	var se *runtime.SpecError
	if !errors.As(err, &se) || se.Field != "autoscale" {
		t.Fatalf("autoscale of kind count: %v, want a SpecError of field autoscale", err)
	}
	if _, err := e.PutJob(runtime.Spec{Name: "c", Kind: "count", Input: "s", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Rescale(context.Background(), "c", 2, "test"); !errors.Is(err, runtime.ErrNotSupported) {
		t.Fatalf("rescale of kind count: %v, want ErrNotSupported", err)
	}
}
