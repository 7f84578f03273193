package runtime

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// A job whose events are half of one key shows it: the hottest key, the
// partition it goes to, and that partition's load well above the mean.
func TestSkewShowsTheHotKey(t *testing.T) {
	e := testEngine(t, Config{Partitions: 4})
	j := mustPut(t, e, Spec{Name: "hh", Kind: "heavy_hitters", Input: "s", Partitions: 4, Params: map[string]any{"field": "u"}})
	lines := make([]string, 400)
	for i := range lines {
		key := "hot"
		if i%2 == 1 {
			key = fmt.Sprintf("k%d", i)
		}
		lines[i] = fmt.Sprintf(`{"key":%q,"u":"x"}`, key)
	}
	stop := make(chan struct{})
	sent := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				sent <- nil
				return
			default:
			}
			if _, err := ingest(e, "s", lines...); err != nil {
				sent <- err
				return
			}
		}
	}()
	defer func() {
		close(stop)
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sk := j.Status(false).Elastic.Skew
		// Half the events on one of 4 partitions: at least twice the mean.
		if sk != nil && sk.Imbalance >= 2 && len(sk.HotKeys) > 0 {
			hot := sk.HotKeys[0]
			if hot.Key != "hot" || hot.Partition != PartitionOf("hot", 4) {
				t.Fatalf("hottest key %+v, want hot on partition %d", hot, PartitionOf("hot", 4))
			}
			for _, l := range sk.Loads {
				if l > sk.Loads[hot.Partition] {
					t.Fatalf("loads %v: the hot key's partition is not the busiest", sk.Loads)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("skew %+v", sk)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A key that holds 30% of a job's events makes its partition carry far
// more than the mean; spreading hot keys shares it out: the imbalance of
// the events each partition processed goes from over 2 to below 1.3, and
// every event is still processed once.
func TestSpreadingHotKeysEvensTheLoad(t *testing.T) {
	imbalance := func(spread *SpreadSpec) (float64, *SpreadStatus) {
		e := testEngine(t, Config{})
		j := mustPut(t, e, Spec{Name: "hh", Kind: "heavy_hitters", Input: "s", Partitions: 8, Spread: spread,
			Params: map[string]any{"field": "item", "counters": 100}})
		const requests, per = 40, 1000
		for r := range requests {
			lines := make([]string, per)
			for i := range lines {
				key := fmt.Sprintf("u%d", (r*per+i)%233) // 70% over 233 keys
				if i%10 < 3 {
					key = "hot" // 30%
				}
				lines[i] = fmt.Sprintf(`{"key":%q,"item":"i%d"}`, key, i%7)
			}
			if _, err := ingest(e, "s", lines...); err != nil {
				t.Fatal(err)
			}
		}
		waitIdle(t, j)
		var most, sum uint64
		for _, p := range j.parts {
			n := p.processed.Load()
			most, sum = max(most, n), sum+n
		}
		if sum != requests*per {
			t.Fatalf("processed %d of %d events", sum, requests*per)
		}
		return float64(most) / (float64(sum) / 8), j.Status(false).Elastic.Skew.Spread
	}
	without, st := imbalance(nil)
	if without <= 2 || st != nil {
		t.Fatalf("without spreading: imbalance %.2f (want over 2), spread status %+v", without, st)
	}
	with, st := imbalance(&SpreadSpec{Above: 0.1})
	if with >= 1.3 {
		t.Fatalf("with spreading: imbalance %.2f, want below 1.3 (without: %.2f)", with, without)
	}
	if st == nil || len(st.Keys) != 1 || st.Keys[0] != "hot" || st.Events < 10_000 {
		t.Fatalf("spread status %+v, want the key hot and most of its 12,000 events spread", st)
	}
	t.Logf("imbalance without spreading %.2f, with %.2f; %d events spread", without, with, st.Events)
}

// Spreading is refused where it would change answers (a join) and out of
// its range, naming the field.
func TestSpreadSpecErrors(t *testing.T) {
	e := testEngine(t, Config{})
	for _, tc := range []struct {
		spec  Spec
		field string
	}{
		{Spec{Name: "j", Kind: "join", Left: "a", Right: "b", Params: map[string]any{"on": "k", "window": "1s"}, Spread: &SpreadSpec{}}, "spread"},
		{Spec{Name: "h", Kind: "heavy_hitters", Input: "s", Params: map[string]any{"field": "f"}, Spread: &SpreadSpec{Above: 0.9}}, "spread.above"},
	} {
		_, err := e.PutJob(tc.spec)
		var se *SpecError
		if !errors.As(err, &se) || se.Field != tc.field {
			t.Errorf("%s: got %v, want an error on %s", tc.spec.Kind, err, tc.field)
		}
	}
}
