package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// joinEvent is one generated event and the stream it goes to.
type joinEvent struct{ stream, line string }

// joinEvents makes n events alternating at random between the two
// streams (imp: key field ad, a number; clk: ad_id, a string), ts rising
// 1 ms per event with up to disorder ms of shuffle, in arrival order, with
// the true number of matches (nested loop) within within ms.
func joinEvents(seed uint64, n, keys int, disorder, within int64) (out []joinEvent, truth int) {
	r := rand.New(rand.NewPCG(seed, 7))
	type ev struct {
		side int
		key  int
		ts   int64
	}
	evs := make([]ev, n)
	for i := range evs {
		evs[i] = ev{r.IntN(2), r.IntN(keys), 1_000_000 + int64(i) - r.Int64N(disorder+1)}
		if evs[i].side == 0 {
			out = append(out, joinEvent{"imp", fmt.Sprintf(`{"ad":%d,"ts":%d,"price":%d}`, evs[i].key, evs[i].ts, i%10)})
		} else {
			out = append(out, joinEvent{"clk", fmt.Sprintf(`{"ad_id":"%d","ts":%d}`, evs[i].key, evs[i].ts)})
		}
	}
	for i, a := range evs {
		for _, b := range evs[:i] {
			if a.side != b.side && a.key == b.key && a.ts-b.ts <= within && b.ts-a.ts <= within {
				truth++
			}
		}
	}
	return out, truth
}

func joinSpec(params map[string]any) Spec {
	p := map[string]any{"left_on": "ad", "right_on": "ad_id", "within": "50ms", "allowed_lateness": "20ms"}
	for k, v := range params {
		p[k] = v
	}
	return Spec{Name: "j", Kind: "join", Left: "imp", Right: "clk", Partitions: 2, Params: p}
}

// ingestBoth posts the events in arrival order, each run of one stream's
// events in one request.
func ingestBoth(t *testing.T, e *Engine, evs []joinEvent) {
	t.Helper()
	for len(evs) > 0 {
		n := 1
		for n < len(evs) && evs[n].stream == evs[0].stream {
			n++
		}
		lines := make([]string, n)
		for i := range lines {
			lines[i] = evs[i].line
		}
		if _, err := ingest(e, evs[0].stream, lines...); err != nil {
			t.Fatal(err)
		}
		evs = evs[n:]
	}
}

func TestJoinJobMatchesNestedLoop(t *testing.T) {
	e := testEngine(t, Config{})
	j := mustPut(t, e, joinSpec(map[string]any{"value": "price"}))
	sub := e.Hub().Subscribe([]string{"j"}, []string{TypeMatch}, 100_000)
	defer e.Hub().Unsubscribe(sub)
	evs, truth := joinEvents(1, 4000, 30, 5, 50)
	ingestBoth(t, e, evs)
	waitIdle(t, j)
	deadline := time.Now().Add(10 * time.Second)
	var m JoinStatus
	for {
		var err error
		if m, err = j.Matches(WindowCurrent, 5); err != nil {
			t.Fatal(err)
		}
		if m.Matches == uint64(truth) && m.Seen == 4000 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if truth == 0 || m.Matches != uint64(truth) || m.Late != 0 || m.Evicted != 0 {
		t.Fatalf("join found %d matches (late %d, evicted %d), the nested loop %d", m.Matches, m.Late, m.Evicted, truth)
	}
	if e := m.Estimate; e == nil || !e.Exact || e.Count.Estimate != float64(truth) || e.Avg == nil {
		t.Fatalf("estimate %+v, want exact %d", m.Estimate, truth)
	}
	if len(m.Recent) != 5 || m.StateTuples == 0 || m.StateBytes > m.MaxStateBytes {
		t.Fatalf("status %+v", m)
	}
	got := 0
	for got < truth {
		select {
		case msg := <-sub.C:
			if !strings.Contains(string(msg), `"type":"match"`) {
				t.Fatalf("message %s", msg)
			}
			got++
		case <-time.After(5 * time.Second):
			t.Fatalf("%d match messages, want %d", got, truth)
		}
	}
	if st := j.Status(false); sec(st).Join == nil || sec(st).Join.Matches != uint64(truth) || len(st.Streams) != 2 {
		t.Fatalf("job status %+v", sec(st).Join)
	}
}

func TestJoinSpecAndInputErrors(t *testing.T) {
	e := testEngine(t, Config{})
	for _, tc := range []struct {
		spec  Spec
		field string
	}{
		{Spec{Name: "a", Kind: "join", Right: "r", Params: map[string]any{"on": "k", "within": "1s"}}, "left"},
		{Spec{Name: "a", Kind: "join", Left: "l", Right: "l", Params: map[string]any{"on": "k", "within": "1s"}}, "right"},
		{Spec{Name: "a", Kind: "join", Input: "x", Left: "l", Right: "r", Params: map[string]any{"on": "k", "within": "1s"}}, "input"},
		{Spec{Name: "a", Kind: "logreg", Input: "x", Left: "l"}, "left"},
		{Spec{Name: "a", Kind: "join", Left: "l", Right: "r", Params: map[string]any{"within": "1s"}}, "params.on"},
		{Spec{Name: "a", Kind: "join", Left: "l", Right: "r", Params: map[string]any{"on": "k"}}, "params.within"},
		{Spec{Name: "a", Kind: "join", Left: "l", Right: "r", Params: map[string]any{"on": "k", "within": "soon"}}, "params.within"},
		{Spec{Name: "a", Kind: "join", Left: "l", Right: "r", Params: map[string]any{"on": "k", "within": "1s", "max_state": "12XB"}}, "params.max_state"},
		{Spec{Name: "a", Kind: "join", Left: "l", Right: "r", Params: map[string]any{"on": "k", "within": "1s", "sample": 0}}, "params.sample"},
		{Spec{Name: "a", Kind: "join", Left: "l", Right: "r", Params: map[string]any{"on": "k", "within": "1s", "value_side": "up"}}, "params.value_side"},
	} {
		_, err := e.PutJob(tc.spec)
		var se *SpecError
		if !errors.As(err, &se) || se.Field != tc.field {
			t.Errorf("%+v: got %v, want an error on %s", tc.spec, err, tc.field)
		}
	}
	mustPut(t, e, joinSpec(map[string]any{"value": "price", "max_state": "1MiB"}))
	for _, tc := range []struct {
		stream, line, field string
	}{
		{"imp", `{"ts":1,"price":1}`, "ad"},
		{"clk", `{"ad_id":[1],"ts":1}`, "ad_id"},
		{"clk", `{"ad_id":null,"ts":1}`, "ad_id"},
		{"imp", `{"ad":"a","ts":1,"price":"high"}`, "price"},
		{"imp", `{"ad":"a","ts":"yesterday","price":1}`, "ts"},
	} {
		_, err := ingest(e, tc.stream, `{"ad":"ok","ad_id":"ok","ts":1,"price":1}`, tc.line)
		var ie *InputError
		if !errors.As(err, &ie) || ie.Line != 2 || ie.Field != tc.field {
			t.Errorf("%s %s: got %v, want line 2 field %s", tc.stream, tc.line, err, tc.field)
		}
	}
}

// A join restarted from its backups (graceful close) has the same state.
func TestJoinRecoversFromBackups(t *testing.T) {
	dir := t.TempDir()
	evs, truth := joinEvents(2, 3000, 20, 5, 50)
	spec := joinSpec(map[string]any{"sample": 0.5, "within": "50ms", "value": "price"})
	spec.FT = FTSpec{MaxDivergence: 100}
	e := ftEngine(t, dir)
	j := mustPut(t, e, spec)
	ingestBoth(t, e, evs[:1500])
	waitIdle(t, j)
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	before, _ := j.Matches(WindowCurrent, 0)
	e2 := ftEngine(t, dir)
	defer e2.Close(context.Background())
	j2 := mustPut(t, e2, spec)
	after, _ := j2.Matches(WindowCurrent, 0)
	if after.Matches != before.Matches || after.StateTuples != before.StateTuples || after.Seen != before.Seen || before.Seen == 0 {
		t.Fatalf("before %+v\nafter %+v", before, after)
	}
	if st := j2.Status(false); st.FT == nil || st.FT.Backups.StoredCount == 0 || st.FT.Recovery == nil || !st.FT.Recovery.Clean {
		t.Fatalf("ft %+v", st.FT)
	}
	if h := j2.Status(false).FT.Recoveries; len(h) != 1 || !h[0].Clean {
		t.Fatalf("recovery history %+v", h)
	}
	// One unit of state per partition, each with its own θ.
	if us := j.Status(false).FT.Units; len(us) != 2 || us[1].Partition != 1 || us[1].Theta != 25 || us[0].Full+us[0].Delta == 0 {
		t.Fatalf("units %+v", us)
	}
	ingestBoth(t, e2, evs[1500:])
	waitIdle(t, j2)
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, _ := j2.Matches(WindowCurrent, 0)
		if m.Seen == 3000 {
			e := m.Estimate
			if !(e.Count.Low <= float64(truth) && float64(truth) <= e.Count.High) {
				t.Fatalf("interval [%v, %v] misses the true count %d", e.Count.Low, e.Count.High, truth)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("seen %d of 3000", m.Seen)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
