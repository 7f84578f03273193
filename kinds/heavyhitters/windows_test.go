package heavyhitters

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/mlstream/mlstream/kinds/internal/synopsis"
	"github.com/mlstream/mlstream/kinds/internal/synopsis/windowtest"
	"github.com/mlstream/mlstream/runtime"
	"github.com/mlstream/mlstream/synopses"
)

// testJob is a job of parts partitions with windows of size ms, on clock.
func testJob(parts, counters int, size, lateness, idle time.Duration, clock *windowtest.Clock) *job {
	j := &job{k: counters, counters: counters, sp: windowtest.Params("item", size, lateness, idle)}
	j.wm = j.sp.NewWatermark(clock.Now)
	for i := range parts {
		j.NewPartition(i, runtime.Emitter{})
	}
	return j
}

// feed processes events at partition p and publishes its windows.
func (j *job) feed(p int, seq *uint64, evs ...windowtest.Event) {
	windowtest.Feed(j.parts[p], seq, evs...)
}

// within checks a top k against exact counts: the total exact, each
// listed item's count within its bounds, any other within max_untracked.
func within(t *testing.T, what string, got TopK, truth map[string]uint64) {
	t.Helper()
	var total uint64
	for _, n := range truth {
		total += n
	}
	if got.Total != total {
		t.Fatalf("%s: total %d, want %d", what, got.Total, total)
	}
	for key, n := range truth {
		i := slices.IndexFunc(got.Items, func(it synopses.Item) bool { return it.Key == key })
		if i < 0 && n > got.MaxUntracked || i >= 0 && (n < got.Items[i].Lower || n > got.Items[i].Upper) {
			t.Fatalf("%s: item %s counted %d, answer %+v (max untracked %d)", what, key, n, got.Items[max(i, 0)], got.MaxUntracked)
		}
	}
}

// Random streams over 2-4 partitions, with event times disordered by at
// most the allowed lateness and fed in a random interleaving: after every
// batch, last is the window just before the job's watermark, holding
// exactly that window's events from every partition (the window is
// closed: no later event falls in it); current is the window the
// watermark is in, holding exactly its events processed so far.
func TestWindowsAcrossPartitionsAgainstOracle(t *testing.T) {
	const size, disorder = 1000, 300
	for seed := range uint64(6) {
		r := rand.New(rand.NewPCG(seed, 36))
		parts := 2 + r.IntN(3)
		clock := &windowtest.Clock{T: time.Unix(0, 0)}
		j := testJob(parts, 64, size*time.Millisecond, disorder*time.Millisecond, time.Minute, clock)
		streams := windowtest.Stream(r, 30_000, parts, 1_700_000_000_000, 1, disorder, 300)
		whole := windowtest.All(streams, size)
		var seq uint64
		checked := map[int64]bool{}
		windowtest.Run(r, streams, size, 60, func(p int, evs []windowtest.Event) { j.feed(p, &seq, evs...) }, func(st *windowtest.State) {
			wm, ok := st.Watermark(disorder)
			last, cur := j.topK(synopsis.WindowLast, 64), j.topK(synopsis.WindowCurrent, 64)
			if !ok {
				if last.Watermark != nil || last.Total != 0 {
					t.Fatalf("seed %d: no watermark yet, last %+v", seed, last)
				}
				return
			}
			c := whole.Start(wm)
			if last.Watermark == nil || *last.Watermark != wm || cur.Start != c || cur.End != c+size || last.Start != c-size {
				t.Fatalf("seed %d: watermark %d: current [%d,%d) last from %d, watermark %v", seed, wm, cur.Start, cur.End, last.Start, last.Watermark)
			}
			if cur.EvictedWindows != 0 || last.Late != 0 || last.Dropped != 0 {
				t.Fatalf("seed %d: %d windows evicted, %d late, %d dropped", seed, cur.EvictedWindows, last.Late, last.Dropped)
			}
			within(t, fmt.Sprintf("seed %d: last [%d,%d) at watermark %d", seed, last.Start, last.End, wm), last, whole.Counts[c-size])
			within(t, "current", cur, st.Seen.Counts[c])
			checked[c-size] = true
		})
		if len(checked) < 10 {
			t.Fatalf("seed %d: %d closed windows checked", seed, len(checked))
		}
	}
}

// One event of the next window at one partition closes nothing: current
// is still window W, without that event, and last is W−1, empty. When
// the other partition passes W's end too, last is W with every
// partition's events.
func TestNextWindowEventAtOnePartition(t *testing.T) {
	clock := &windowtest.Clock{T: time.Unix(0, 0)}
	j := testJob(2, 16, 10*time.Second, 0, 10*time.Second, clock)
	var seq uint64
	for range 5 {
		j.feed(0, &seq, windowtest.Event{Key: "a", TS: 10_100})
	}
	for range 3 {
		j.feed(1, &seq, windowtest.Event{Key: "b", TS: 10_200})
	}
	j.feed(0, &seq, windowtest.Event{Key: "next", TS: 20_000})

	cur, last := j.topK(synopsis.WindowCurrent, 16), j.topK(synopsis.WindowLast, 16)
	if cur.Start != 10_000 || cur.End != 20_000 {
		t.Fatalf("current is [%d,%d), want [10000,20000)", cur.Start, cur.End)
	}
	within(t, "current", cur, map[string]uint64{"a": 5, "b": 3})
	if last.Start != 0 || last.End != 10_000 || last.Total != 0 {
		t.Fatalf("last is [%d,%d) with %d events, want [0,10000) empty", last.Start, last.End, last.Total)
	}

	j.feed(1, &seq, windowtest.Event{Key: "next", TS: 20_500})
	cur, last = j.topK(synopsis.WindowCurrent, 16), j.topK(synopsis.WindowLast, 16)
	if last.Start != 10_000 || cur.Start != 20_000 {
		t.Fatalf("last from %d, current from %d; want 10000 and 20000", last.Start, cur.Start)
	}
	within(t, "last", last, map[string]uint64{"a": 5, "b": 3})
	within(t, "current", cur, map[string]uint64{"next": 2})
	if want := []synopses.Span{{Start: 10_000, End: 20_000}}; !slices.Equal(last.Closed, want) {
		t.Fatalf("closed %v, want %v", last.Closed, want)
	}
}

// A partition that sees no event holds the watermark back only for the
// idle timeout, by the job's clock; its events behind the watermark then
// are late, counted and in the status.
func TestIdlePartitionLeftOut(t *testing.T) {
	clock := &windowtest.Clock{T: time.Unix(1000, 0)}
	j := testJob(2, 16, 10*time.Second, 0, 10*time.Second, clock)
	var seq uint64
	j.feed(0, &seq, windowtest.Event{Key: "a", TS: 10_100}, windowtest.Event{Key: "b", TS: 25_000})
	if last := j.topK(synopsis.WindowLast, 16); last.Watermark != nil || last.Total != 0 {
		t.Fatalf("partition 1 not idle yet: watermark %v, last has %d events", last.Watermark, last.Total)
	}
	clock.T = clock.T.Add(9 * time.Second)
	j.feed(0, &seq, windowtest.Event{Key: "c", TS: 25_500})
	if last := j.topK(synopsis.WindowLast, 16); last.Watermark != nil {
		t.Fatalf("idle 9s of 10s: watermark %d", *last.Watermark)
	}
	clock.T = clock.T.Add(time.Second)
	last := j.topK(synopsis.WindowLast, 16)
	if last.Watermark == nil || *last.Watermark != 25_500 || last.Start != 10_000 || !slices.Equal(last.IdlePartitions, []int{1}) {
		t.Fatalf("after the idle timeout: watermark %v, last from %d, idle %v", last.Watermark, last.Start, last.IdlePartitions)
	}
	within(t, "last", last, map[string]uint64{"a": 1})

	j.feed(1, &seq, windowtest.Event{Key: "old", TS: 12_000})
	if st := j.Status(false).(*Status); st.TopK.Late != 1 {
		t.Fatalf("late %d, want 1", st.TopK.Late)
	}
	if last := j.topK(synopsis.WindowLast, 16); last.Start != 10_000 || len(last.IdlePartitions) != 0 {
		t.Fatalf("partition 1 active again: last from %d, idle %v", last.Start, last.IdlePartitions)
	}
}

// A job restored from its partitions' backups answers every window as
// before: the restored event times give the same watermark's window.
func TestRecoveredWindowsAnswerAlike(t *testing.T) {
	clock := &windowtest.Clock{T: time.Unix(0, 0)}
	j := testJob(2, 16, time.Second, 0, time.Minute, clock)
	var seq uint64
	r := rand.New(rand.NewPCG(7, 36))
	for range 400 {
		p := r.IntN(2)
		j.feed(p, &seq, windowtest.Event{Key: fmt.Sprint("k", r.IntN(20)), TS: 5_000 + int64(seq)*10 + int64(p)*700})
	}
	back := testJob(2, 16, time.Second, 0, time.Minute, clock)
	for i, p := range j.parts {
		var buf bytes.Buffer
		if err := p.BackupState(&buf, true); err != nil {
			t.Fatal(err)
		}
		if err := back.parts[i].RecoverState(&buf); err != nil {
			t.Fatal(err)
		}
		back.parts[i].Recovered(p.StateSeqs())
	}
	for _, w := range []string{synopsis.WindowCurrent, synopsis.WindowLast, synopsis.WindowAll} {
		a, b := j.topK(w, 16), back.topK(w, 16)
		if a.Start != b.Start || a.End != b.End || a.Total != b.Total || !slices.Equal(a.Items, b.Items) || !slices.Equal(a.Closed, b.Closed) {
			t.Fatalf("%s: restored [%d,%d) total %d closed %v, was [%d,%d) total %d closed %v", w, b.Start, b.End, b.Total, b.Closed, a.Start, a.End, a.Total, a.Closed)
		}
	}
}
