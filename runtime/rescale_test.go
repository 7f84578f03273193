package runtime

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/mlstream/mlstream/joins"
	"github.com/valyala/fastjson"
)

func mustRescale(t *testing.T, e *Engine, name string, n int) RescaleReport {
	t.Helper()
	rep, err := e.Rescale(context.Background(), name, n, "test")
	if err != nil {
		t.Fatalf("rescale to %d: %v", n, err)
	}
	j, err := e.Job(name)
	if err != nil {
		t.Fatal(err)
	}
	if len(j.parts) != n || j.spec.Partitions != n {
		t.Fatalf("rescaled to %d partitions, the job has %d (spec %d)", n, len(j.parts), j.spec.Partitions)
	}
	return rep
}

// latestJob is the job name runs now.
func latestJob(t *testing.T, e *Engine, name string) *Job {
	t.Helper()
	j, err := e.Job(name)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func predictOne(t *testing.T, j *Job, event string) float64 {
	t.Helper()
	p, err := j.Predictor()
	if err != nil {
		t.Fatal(err)
	}
	v, err := fastjson.Parse(event)
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Predict(v, 1)
	if err != nil {
		t.Fatal(err)
	}
	return got.P
}

// A logreg job rescaled up and down keeps its counts, its metrics and its
// model (the same predictions), and goes on learning.
func TestRescaleLogregKeepsModelAndCounts(t *testing.T) {
	e := testEngine(t, Config{Partitions: 2})
	spec := Spec{Name: "lr", Kind: "logreg", Input: "s", Partitions: 2, Params: map[string]any{"hash_bits": 12}}
	j := mustPut(t, e, spec)
	if _, err := ingest(e, "s", events(300, 0)...); err != nil {
		t.Fatal(err)
	}
	waitCount(t, j, 300)
	probe := `{"features":{"x":3}}`
	before := predictOne(t, j, probe)
	version := sec(j.Status(false)).Model.Version
	for _, n := range []int{5, 1, 3} {
		rep := mustRescale(t, e, "lr", n)
		j = latestJob(t, e, "lr")
		st := j.Status(false)
		if st.Processed != 300 || st.Accepted != 300 || sec(st).Metrics.All.Count != 300 {
			t.Fatalf("after rescale to %d: processed %d accepted %d learned %d, want 300", n, st.Processed, st.Accepted, sec(st).Metrics.All.Count)
		}
		if got := predictOne(t, j, probe); got != before {
			t.Fatalf("after rescale to %d: prediction %v, was %v", n, got, before)
		}
		if rep.To != n || rep.Reason != "test" || rep.Generation == 0 {
			t.Fatalf("report %+v", rep)
		}
		if st.Elastic == nil || st.Elastic.Partitions != n || len(st.Elastic.Last) == 0 {
			t.Fatalf("elastic status %+v", st.Elastic)
		}
	}
	if _, err := ingest(e, "s", events(100, 300)...); err != nil {
		t.Fatal(err)
	}
	waitCount(t, j, 400)
	if v := sec(j.Status(false)).Model.Version; v <= version {
		t.Fatalf("model version %d after learning more, was %d", v, version)
	}
	if got := predictOne(t, j, probe); got == before {
		t.Fatal("prediction did not move after 100 more events")
	}
}

func hhEvents(n, from int) []string {
	out := make([]string, n)
	for i := range out {
		k := from + i
		out[i] = fmt.Sprintf(`{"key":"k%d","u":"item%d"}`, k, k%37*(k%5+1)%53)
	}
	return out
}

// Heavy hitters and distinct counts answer the same before and after a
// rescale (no counter ever evicted: the answers are exact), and go on
// counting.
func TestRescaleSynopsesAnswerTheSame(t *testing.T) {
	e := testEngine(t, Config{Partitions: 3})
	hh := mustPut(t, e, Spec{Name: "hh", Kind: "heavy_hitters", Input: "s", Partitions: 3, Params: map[string]any{"field": "u", "counters": 200, "k": 60}})
	dc := mustPut(t, e, Spec{Name: "dc", Kind: "distinct", Input: "s", Partitions: 3, Params: map[string]any{"field": "u"}})
	if _, err := ingest(e, "s", hhEvents(2000, 0)...); err != nil {
		t.Fatal(err)
	}
	waitProcessed(t, hh, 2000)
	waitProcessed(t, dc, 2000)
	publishAll(t, hh)
	publishAll(t, dc)
	top := func() any { return sec(latestJob(t, e, "hh").Status(false)).TopK }
	distinct := func() any { st, _ := latestJob(t, e, "dc").Query("distinct", nil, ""); return st }
	wantTop, wantDistinct := top(), distinct()
	for _, n := range []int{7, 2, 1, 4} {
		mustRescale(t, e, "hh", n)
		mustRescale(t, e, "dc", n)
		if got := top(); !reflect.DeepEqual(got, wantTop) {
			t.Fatalf("top k after rescale to %d:\n%+v\nwant\n%+v", n, got, wantTop)
		}
		if got := distinct(); !reflect.DeepEqual(got, wantDistinct) {
			t.Fatalf("distinct after rescale to %d: %+v, want %+v", n, got, wantDistinct)
		}
	}
	// The same events again, into 4 partitions: every count doubles.
	if _, err := ingest(e, "s", hhEvents(2000, 0)...); err != nil {
		t.Fatal(err)
	}
	waitTotal(t, latestJob(t, e, "hh"), 4000)
	got := sec(latestJob(t, e, "hh").Status(false)).TopK
	want := wantTop.(*TopK)
	if got.Total != 2*want.Total || got.Items[0].Estimate != 2*want.Items[0].Estimate {
		t.Fatalf("after more events: total %d top %+v, want %d and twice %+v", got.Total, got.Items[0], 2*want.Total, want.Items[0])
	}
}

// A join's buffered tuples move with their key: a left event before the
// rescale matches a right event after it.
func TestRescaleJoinRehashesTuples(t *testing.T) {
	e := testEngine(t, Config{Partitions: 2})
	j := mustPut(t, e, Spec{Name: "j", Kind: "join", Left: "L", Right: "R", Partitions: 2, Params: map[string]any{"on": "k", "within": "1m"}})
	var left []string
	for i := range 50 {
		left = append(left, fmt.Sprintf(`{"k":"key%d","ts":%d}`, i, 1000+i))
	}
	if _, err := ingest(e, "L", left...); err != nil {
		t.Fatal(err)
	}
	waitProcessed(t, j, 50)
	publishAll(t, j)
	before := sec(j.Status(false)).Join
	mustRescale(t, e, "j", 5)
	if after := sec(latestJob(t, e, "j").Status(false)).Join; after.Seen != before.Seen || after.StateTuples != 50 || after.StateTuples != before.StateTuples {
		t.Fatalf("join after the rescale: seen %d with %d tuples, before %d with %d", after.Seen, after.StateTuples, before.Seen, before.StateTuples)
	}
	var right []string
	for i := range 50 {
		right = append(right, fmt.Sprintf(`{"k":"key%d","ts":%d}`, i, 2000+i))
	}
	if _, err := ingest(e, "R", right...); err != nil {
		t.Fatal(err)
	}
	j = latestJob(t, e, "j")
	waitProcessed(t, j, 100)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := sec(j.Status(false)).Join
		if st.Matches == 50 && st.Seen == 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("join after rescale: %d matches of %d tuples, want 50 of 100", st.Matches, st.Seen)
		}
		time.Sleep(time.Millisecond)
	}
}

// Requests keep coming while the job is rescaled again and again: every
// one is accepted (none waits past IngestWait) and every event counted
// once.
func TestRescaleUnderIngest(t *testing.T) {
	e := testEngine(t, Config{Partitions: 2, IngestWait: 10 * time.Second})
	mustPut(t, e, Spec{Name: "hh", Kind: "heavy_hitters", Input: "s", Partitions: 2, Params: map[string]any{"field": "u"}})
	const senders, requests, per = 4, 50, 20
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range requests {
				if _, err := ingest(e, "s", hhEvents(per, (s*requests+r)*per)...); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for _, n := range []int{4, 1, 3, 6, 2} {
		mustRescale(t, e, "hh", n)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	const total = senders * requests * per
	j := latestJob(t, e, "hh")
	waitProcessed(t, j, total)
	waitTotal(t, j, total) // published at the next coordination
	st := j.Status(false)
	if st.Accepted != total || st.Processed != total || sec(st).TopK.Total != total {
		t.Fatalf("accepted %d processed %d counted %d, want %d", st.Accepted, st.Processed, sec(st).TopK.Total, total)
	}
	if st.Elastic.Rescales != 5 {
		t.Fatalf("rescales %d, want 5", st.Elastic.Rescales)
	}
}

func TestRescaleRefusals(t *testing.T) {
	e := testEngine(t, Config{Partitions: 2, MaxPartitions: 8})
	mustPut(t, e, Spec{Name: "hh", Kind: "heavy_hitters", Input: "s", Partitions: 2, Params: map[string]any{"field": "u"}})
	var se *SpecError
	for _, n := range []int{0, -1, 9} {
		if _, err := e.Rescale(context.Background(), "hh", n, "test"); !errors.As(err, &se) || se.Field != "partitions" {
			t.Fatalf("rescale to %d: %v, want a SpecError of field partitions", n, err)
		}
	}
	if _, err := e.Rescale(context.Background(), "nope", 2, "test"); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("unknown job: %v", err)
	}
	latestJob(t, e, "hh").Pause()
	if _, err := e.Rescale(context.Background(), "hh", 3, "test"); !errors.Is(err, ErrRescalePaused) {
		t.Fatalf("paused job: %v", err)
	}
	latestJob(t, e, "hh").Resume()
	// A PUT of the spec with another partition count rescales.
	spec := Spec{Name: "hh", Kind: "heavy_hitters", Input: "s", Partitions: 5, Params: map[string]any{"field": "u"}}
	if created, err := e.PutJob(spec); err != nil || created {
		t.Fatalf("PUT with 5 partitions: created %v, %v", created, err)
	}
	if n := len(latestJob(t, e, "hh").parts); n != 5 {
		t.Fatalf("PUT rescaled to %d partitions, want 5", n)
	}
	spec.Params = map[string]any{"field": "v"}
	if _, err := e.PutJob(spec); !errors.Is(err, ErrJobExists) {
		t.Fatalf("PUT of another spec: %v, want ErrJobExists", err)
	}
	// A count the kind's params do not allow: its error, naming the param.
	mustPut(t, e, Spec{Name: "j", Kind: "join", Left: "L", Right: "R", Partitions: 2, Params: map[string]any{"on": "k", "within": "1m", "max_state": 2 * joins.MinBytes}})
	if _, err := e.Rescale(context.Background(), "j", 8, "test"); !errors.As(err, &se) || se.Field != "params.max_state" {
		t.Fatalf("join rescaled past its max_state: %v, want a SpecError of params.max_state", err)
	}
	if n := len(latestJob(t, e, "j").parts); n != 2 {
		t.Fatalf("the refused rescale left %d partitions", n)
	}
}

// publishAll has every partition of j coordinate (publish its state for
// queries) after what it has queued.
func publishAll(t *testing.T, j *Job) {
	t.Helper()
	for _, p := range j.parts {
		if err := j.Do(context.Background(), p.index, p.op.coordinate); err != nil {
			t.Fatal(err)
		}
	}
}
