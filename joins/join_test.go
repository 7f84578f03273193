package joins

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// ev is one generated tuple.
type ev struct {
	side  Side
	key   string
	ts    int64
	value float64
	seq   uint64
}

// genStream makes n tuples over keys keys, event times advancing about
// step ms per tuple, shuffled by up to disorder ms (so in order within a
// lateness of disorder), and late ones (further back than that) with
// probability lateP.
func genStream(seed uint64, n, keys int, step, disorder int64, lateP float64) []ev {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]ev, n)
	for i := range out {
		ts := int64(i) * step
		if disorder > 0 {
			ts -= r.Int64N(disorder + 1)
		}
		if r.Float64() < lateP {
			ts -= 10*disorder + 1000
		}
		out[i] = ev{side: Side(r.IntN(2)), key: fmt.Sprint("k", r.IntN(keys)), ts: max(ts, 0), value: float64(r.IntN(100)), seq: uint64(i + 1)}
	}
	return out
}

// oracle is the nested-loop join: every pair of non-late tuples (late as
// the join defines it, by arrival order) with equal keys within the
// interval.
func oracle(evs []ev, within, lateness int64) (matches []Match, late int) {
	maxTS := int64(math.MinInt64)
	var kept []ev
	for _, e := range evs {
		if maxTS != math.MinInt64 && e.ts < maxTS-lateness {
			late++
			continue
		}
		maxTS = max(maxTS, e.ts)
		kept = append(kept, e)
	}
	// Nested loops over the tuples of each key, in arrival order.
	byKey := map[string][]ev{}
	var keys []string
	for _, e := range kept {
		if byKey[e.key] == nil {
			keys = append(keys, e.key)
		}
		byKey[e.key] = append(byKey[e.key], e)
	}
	for _, k := range keys {
		matches = appendPairs(matches, byKey[k], within)
	}
	return matches, late
}

func appendPairs(matches []Match, kept []ev, within int64) []Match {
	for i, a := range kept {
		for _, b := range kept[:i] {
			if a.side == b.side || a.ts-b.ts > within || b.ts-a.ts > within {
				continue
			}
			l, r := a, b
			if a.side == Right {
				l, r = b, a
			}
			matches = append(matches, Match{Key: a.key, LeftTS: l.ts, RightTS: r.ts, LeftValue: l.value, RightValue: r.value})
		}
	}
	return matches
}

func sortMatches(ms []Match) {
	slices.SortFunc(ms, func(a, b Match) int {
		return cmpAll(a.Key < b.Key, a.Key > b.Key, a.LeftTS-b.LeftTS, a.RightTS-b.RightTS, int64(a.LeftValue-b.LeftValue), int64(a.RightValue-b.RightValue))
	})
}

func cmpAll(less, more bool, diffs ...int64) int {
	if less {
		return -1
	}
	if more {
		return 1
	}
	for _, d := range diffs {
		if d != 0 {
			return int(max(min(d, 1), -1))
		}
	}
	return 0
}

func run(t *testing.T, j *Join, evs []ev) (matches []Match, late int) {
	t.Helper()
	for _, e := range evs {
		if j.Add(e.side, e.key, e.ts, e.value, e.seq, func(m *Match) { matches = append(matches, *m) }) {
			late++
		}
		if j.StateBytes() > j.cfg.MaxBytes {
			t.Fatalf("state %d bytes above max_state %d", j.StateBytes(), j.cfg.MaxBytes)
		}
	}
	return matches, late
}

func TestMatchesEqualNestedLoop(t *testing.T) {
	for _, tc := range []struct {
		name             string
		disorder, within int64
		lateP            float64
	}{
		{"in order", 0, 50, 0},
		{"out of order within lateness", 200, 50, 0},
		{"with late events", 200, 80, 0.05},
		{"zero interval", 0, 0, 0},
		{"long interval: the ring grows", 100, 20_000, 0.01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seeds := uint64(20)
			if tc.within > 1000 {
				seeds = 3
			}
			for seed := uint64(1); seed <= seeds; seed++ {
				evs := genStream(seed, 3000, 40, 3, tc.disorder, tc.lateP)
				if tc.within == 0 {
					for i := range evs {
						evs[i].ts -= evs[i].ts % 30 // equal times do occur
					}
				}
				j, err := New(Config{Within: tc.within, Lateness: tc.disorder, MaxBytes: 1 << 30, Window: 500})
				if err != nil {
					t.Fatal(err)
				}
				got, late := run(t, j, evs)
				want, wantLate := oracle(evs, tc.within, tc.disorder)
				if late != wantLate || j.Counters().Late != uint64(wantLate) {
					t.Fatalf("seed %d: %d late (counter %d), the oracle %d", seed, late, j.Counters().Late, wantLate)
				}
				if tc.lateP > 0 && late == 0 {
					t.Fatalf("seed %d: no late event generated", seed)
				}
				sortMatches(got)
				sortMatches(want)
				if len(want) == 0 || !slices.Equal(got, want) {
					t.Fatalf("seed %d: %d matches, the nested loop %d", seed, len(got), len(want))
				}
				if j.Counters().Matches != uint64(len(want)) || j.Counters().Evicted != 0 {
					t.Fatalf("seed %d: counters %+v", seed, j.Counters())
				}
				// Windows: exact counts that add up to the matches.
				open, closed := j.Windows()
				var sum float64
				for _, a := range append(open, closed...) {
					e := a.Estimate(1, 0.95)
					if !e.Exact || e.Count.Low != e.Count.High {
						t.Fatalf("seed %d: window %+v not exact without sampling", seed, e)
					}
					sum += e.Count.Estimate
				}
				if len(closed) == 3 { // older windows were dropped
					continue
				}
				if sum != float64(len(want)) {
					t.Fatalf("seed %d: windows count %v matches, want %d", seed, sum, len(want))
				}
			}
		})
	}
}

func TestExpiryKeepsStateSmall(t *testing.T) {
	j, _ := New(Config{Within: 10, Lateness: 10, MaxBytes: 1 << 30})
	evs := genStream(3, 100_000, 1000, 1, 10, 0)
	run(t, j, evs)
	// Only tuples of the last within+lateness ms (and a little disorder) stay.
	if j.Tuples() > 60 {
		t.Fatalf("%d tuples buffered, want at most ~%d", j.Tuples(), 30)
	}
	if c := j.Counters(); c.Expired < 99_000 || c.Evicted != 0 {
		t.Fatalf("counters %+v", c)
	}
}

func TestMaxStateNeverExceeded(t *testing.T) {
	for _, maxBytes := range []int64{MinBytes, 100_000, 1 << 20} {
		j, err := New(Config{Within: 1 << 40, Lateness: 0, MaxBytes: maxBytes})
		if err != nil {
			t.Fatal(err)
		}
		evs := genStream(7, 50_000, 5000, 1, 0, 0)
		got, _ := run(t, j, evs) // checks StateBytes after every tuple
		c := j.Counters()
		if c.Evicted == 0 || j.Tuples() != j.MaxTuples() {
			t.Fatalf("max %d: evicted %d, %d tuples of %d", maxBytes, c.Evicted, j.Tuples(), j.MaxTuples())
		}
		if c.Evicted+uint64(j.Tuples()) != 50_000 {
			t.Fatalf("max %d: %d evicted + %d buffered != 50000", maxBytes, c.Evicted, j.Tuples())
		}
		want, _ := oracle(evs, 1<<40, 0)
		if len(got) >= len(want) {
			t.Fatalf("max %d: eviction lost no match (%d of %d)", maxBytes, len(got), len(want))
		}
		open, _ := j.Windows()
		if e := open[0].Estimate(1, 0.95); e.Complete || e.Exact {
			t.Fatalf("max %d: estimate %+v claims completeness after evictions", maxBytes, e)
		}
	}
	if _, err := New(Config{MaxBytes: MinBytes - 1}); err == nil {
		t.Fatal("a budget below MinBytes was accepted")
	}
}

// joinCount is the join's true COUNT on a stream in event-time order:
// for each tuple, the tuples of its key before it within the interval.
func joinCount(evs []ev, within int64) int {
	byKey := map[string][]ev{}
	n := 0
	for _, e := range evs {
		prev := byKey[e.key]
		for i := len(prev) - 1; i >= 0 && e.ts-prev[i].ts <= within; i-- {
			if prev[i].side != e.side {
				n++
			}
		}
		byKey[e.key] = append(prev, e)
	}
	return n
}

// TestIntervalCoverage checks the Ripple Join interval on seeded runs:
// at 95% confidence it must cover the true COUNT in at least 95% of them,
// and the estimate must be unbiased (mean relative error near zero).
func TestIntervalCoverage(t *testing.T) {
	const runs = 200
	covered, sumRel := 0, 0.0
	for seed := uint64(1); seed <= runs; seed++ {
		evs := genStream(seed, 20_000, 100, 1, 0, 0) // in order: joinCount applies
		truth := float64(joinCount(evs, 100))
		j, _ := New(Config{Within: 100, MaxBytes: 1 << 30, Sample: 0.2, Seed: seed})
		run(t, j, evs)
		open, _ := j.Windows()
		e := open[0].Estimate(0.2, 0.95)
		if e.Count.Low <= truth && truth <= e.Count.High {
			covered++
		}
		sumRel += (e.Count.Estimate - truth) / truth
	}
	cov := float64(covered) / runs
	t.Logf("coverage %.3f over %d runs, mean relative error %+.4f", cov, runs, sumRel/runs)
	if cov < 0.95 {
		t.Fatalf("interval covered the true COUNT in %.1f%% of runs, want at least 95%%", 100*cov)
	}
	if math.Abs(sumRel/runs) > 0.02 {
		t.Fatalf("mean relative error %v: biased", sumRel/runs)
	}
}

func TestSumAndAvg(t *testing.T) {
	evs := genStream(11, 5000, 100, 1, 0, 0)
	m, _ := oracle(evs, 50, 1<<40)
	var sum float64
	for _, x := range m {
		sum += x.RightValue
	}
	j, _ := New(Config{Within: 50, MaxBytes: 1 << 30, ValueSide: Right})
	run(t, j, evs)
	open, _ := j.Windows()
	e := open[0].Estimate(1, 0.95)
	if e.Sum.Estimate != sum || e.Avg == nil || math.Abs(e.Avg.Estimate-sum/float64(len(m))) > 1e-9 || e.Avg.High != e.Avg.Low {
		t.Fatalf("estimate %+v avg %+v, want sum %v over %d", e, e.Avg, sum, len(m))
	}
	// Sampled: the intervals hold the truth and are not degenerate.
	j, _ = New(Config{Within: 50, MaxBytes: 1 << 30, ValueSide: Right, Sample: 0.5, Seed: 3})
	run(t, j, evs)
	open, _ = j.Windows()
	e = open[0].Estimate(0.5, 0.99)
	avg := sum / float64(len(m))
	if !(e.Sum.Low < sum && sum < e.Sum.High && e.Avg.Low < avg && avg < e.Avg.High) {
		t.Fatalf("sampled estimate %+v avg %+v misses sum %v avg %v", e, e.Avg, sum, avg)
	}
}

// TestBackupChain recovers a join from a full backup and deltas taken at
// random points and checks that it goes on exactly as the original.
func TestBackupChain(t *testing.T) {
	for _, sample := range []float64{1, 0.3} {
		evs := genStream(5, 20_000, 300, 1, 20, 0.01)
		cfg := Config{Within: 40, Lateness: 20, MaxBytes: 200_000, Sample: sample, Window: 1000, Seed: 9}
		a, _ := New(cfg)
		var chain [][]byte
		r := rand.New(rand.NewPCG(1, 2))
		half := len(evs) / 2
		for i, e := range evs[:half] {
			a.Add(e.side, e.key, e.ts, e.value, e.seq, nil)
			if r.IntN(200) == 0 || i == half-1 {
				var buf bytes.Buffer
				full := len(chain) == 0 || r.IntN(10) == 0 && i < half-1
				if full {
					chain = chain[:0]
				}
				if err := a.BackupState(&buf, full); err != nil {
					t.Fatal(err)
				}
				if a.StateDivergence() != 0 {
					t.Fatal("divergence not reset by a backup")
				}
				chain = append(chain, buf.Bytes())
			}
		}
		b, _ := New(cfg)
		for _, c := range chain {
			if err := b.RecoverState(bytes.NewReader(c)); err != nil {
				t.Fatalf("sample %v: %v", sample, err)
			}
		}
		if len(chain) < 3 {
			t.Fatalf("only %d backups in the chain", len(chain))
		}
		ma, _ := run(t, a, evs[half:])
		mb, _ := run(t, b, evs[half:])
		if !slices.Equal(ma, mb) || a.Counters() != b.Counters() {
			t.Fatalf("sample %v: recovered join differs: %d vs %d matches, %+v vs %+v", sample, len(ma), len(mb), a.Counters(), b.Counters())
		}
		oa, ca := a.Windows()
		ob, cb := b.Windows()
		if !slices.Equal(oa, ob) || !slices.Equal(ca, cb) {
			t.Fatalf("sample %v: windows differ", sample)
		}
	}
}

func TestDivergenceCountsTupleChanges(t *testing.T) {
	j, _ := New(Config{Within: 10, MaxBytes: 1 << 20})
	for i := range 100 {
		j.Add(Side(i%2), "k", int64(i), 0, uint64(i+1), nil)
	}
	// 100 buffered, and those older than 99−10 expired.
	want := 100 + float64(j.Counters().Expired)
	if j.StateDivergence() != want {
		t.Fatalf("divergence %v, want %v", j.StateDivergence(), want)
	}
}

func TestWidenAfterRecovery(t *testing.T) {
	evs := genStream(2, 4000, 100, 1, 0, 0)
	j, _ := New(Config{Within: 100, MaxBytes: 1 << 30, Sample: 0.3, Window: 0})
	run(t, j, evs)
	open, _ := j.Windows()
	before := open[0].Estimate(0.3, 0.95)
	j.Widen(100)
	open, _ = j.Windows()
	after := open[0].Estimate(0.3, 0.95)
	if !(after.Count.High > before.Count.High && after.Count.Low < before.Count.Low && after.Widened > 1 && after.Lost == 30) {
		t.Fatalf("before %+v, after %+v", before.Count, after)
	}
	j.Widen(1e9)
	open, _ = j.Windows()
	if e := open[0].Estimate(0.3, 0.95); !e.Unbounded {
		t.Fatalf("losing more samples than seen is still bounded: %+v", e)
	}
}

func TestCorruptBackupsRefused(t *testing.T) {
	j, _ := New(Config{Within: 10, MaxBytes: 1 << 20, Sample: 0.5})
	for _, e := range genStream(1, 1000, 10, 1, 0, 0) {
		j.Add(e.side, e.key, e.ts, e.value, e.seq, nil)
	}
	var full bytes.Buffer
	j.BackupState(&full, true)
	b := full.Bytes()
	for _, bad := range [][]byte{nil, b[:len(b)/2], append(slices.Clone(b), 0), []byte("MLJN\x02\x00")} {
		k, _ := New(Config{Within: 10, MaxBytes: 1 << 20, Sample: 0.5})
		if err := k.RecoverState(bytes.NewReader(bad)); err == nil {
			t.Fatalf("corrupt backup of %d bytes accepted", len(bad))
		}
	}
	// A delta that does not follow the state is refused.
	var delta bytes.Buffer
	j.Add(Left, "k1", 2000, 0, 5000, nil)
	j.BackupState(&delta, false)
	k, _ := New(Config{Within: 10, MaxBytes: 1 << 20, Sample: 0.5})
	if err := k.RecoverState(bytes.NewReader(delta.Bytes())); err == nil {
		t.Fatal("a delta without its full backup was accepted")
	}
}

// A window with evicted tuples is incomplete: its estimate is low, and its
// high end allows for the matches the evicted tuples would have found,
// instead of low == high == estimate.
func TestEvictionWidensTheHighSide(t *testing.T) {
	a := Acc{Seen: [2]uint64{100, 100}, Sampled: [2]uint64{100, 100}, M: 50, Sy: 50, Evicted: 20}
	e := a.Estimate(1, 0.95)
	if e.Complete || e.Exact {
		t.Fatalf("complete %v exact %v with evictions", e.Complete, e.Exact)
	}
	if e.Count.Low != 50 || e.Count.Estimate != 50 {
		t.Fatalf("count %+v: the matches found are the low end and the estimate", e.Count)
	}
	// 50 matches over 200 tuples: each tuple is in 0.5 of a match; 20
	// evicted tuples could have found 10 more.
	if want := 60.0; math.Abs(e.Count.High-want) > 1e-9 {
		t.Fatalf("count high %v, want %v", e.Count.High, want)
	}
	if e.Sum.High <= e.Sum.Estimate {
		t.Fatalf("sum %+v: high not above the estimate", e.Sum)
	}
	a.Evicted = 0
	if e := a.Estimate(1, 0.95); e.Count.High != 50 || !e.Exact {
		t.Fatalf("without evictions: %+v exact %v", e.Count, e.Exact)
	}
}
