package distinct

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mlstream/mlstream/kinds/internal/synopsis"
	"github.com/mlstream/mlstream/kinds/internal/synopsis/windowtest"
	"github.com/mlstream/mlstream/runtime"
	"github.com/mlstream/mlstream/synopses"
)

const testPrecision = 12

// testJob is a job of parts partitions with windows of size, on clock.
func testJob(parts int, size, lateness, idle time.Duration, clock *windowtest.Clock) *job {
	j := &job{precision: testPrecision, sp: windowtest.Params("user", size, lateness, idle)}
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

// exact is the estimate of a sketch built from exactly these values.
func exact(t *testing.T, values map[string]uint64) uint64 {
	t.Helper()
	d, err := synopses.NewDistinct(testPrecision)
	if err != nil {
		t.Fatal(err)
	}
	for v := range values {
		d.InsertString(v)
	}
	return d.Estimate()
}

// Random streams over 2-4 partitions, disordered by at most the allowed
// lateness and fed in a random interleaving: after every batch, last is
// the window before the watermark's and its estimate is that of a sketch
// of exactly the window's values (a merge of register maxima is the
// union); current's is that of exactly its values processed so far.
func TestWindowsAcrossPartitionsAgainstOracle(t *testing.T) {
	const size, disorder = 1000, 300
	for seed := range uint64(6) {
		r := rand.New(rand.NewPCG(seed, 36))
		parts := 2 + r.IntN(3)
		clock := &windowtest.Clock{T: time.Unix(0, 0)}
		j := testJob(parts, size*time.Millisecond, disorder*time.Millisecond, time.Minute, clock)
		streams := windowtest.Stream(r, 30_000, parts, 1_700_000_000_000, 1, disorder, 3000)
		whole := windowtest.All(streams, size)
		var seq uint64
		checked := map[int64]bool{}
		windowtest.Run(r, streams, size, 60, func(p int, evs []windowtest.Event) { j.feed(p, &seq, evs...) }, func(st *windowtest.State) {
			wm, ok := st.Watermark(disorder)
			last, cur := j.count(synopsis.WindowLast), j.count(synopsis.WindowCurrent)
			if !ok {
				if last.Watermark != nil || last.Estimate != 0 {
					t.Fatalf("seed %d: no watermark yet, last %+v", seed, last)
				}
				return
			}
			c := whole.Start(wm)
			if last.Watermark == nil || *last.Watermark != wm || cur.Start != c || last.Start != c-size || last.End != c {
				t.Fatalf("seed %d: watermark %d: current from %d, last [%d,%d), watermark %v", seed, wm, cur.Start, last.Start, last.End, last.Watermark)
			}
			if cur.EvictedWindows != 0 || last.Late != 0 || last.Dropped != 0 {
				t.Fatalf("seed %d: %d windows evicted, %d late, %d dropped", seed, cur.EvictedWindows, last.Late, last.Dropped)
			}
			if want := exact(t, whole.Counts[c-size]); last.Estimate != want {
				t.Fatalf("seed %d: last [%d,%d): estimate %d, a sketch of its %d values says %d", seed, last.Start, last.End, last.Estimate, len(whole.Counts[c-size]), want)
			}
			if want := exact(t, st.Seen.Counts[c]); cur.Estimate != want {
				t.Fatalf("seed %d: current from %d: estimate %d, want %d", seed, c, cur.Estimate, want)
			}
			checked[c-size] = true
		})
		if len(checked) < 10 {
			t.Fatalf("seed %d: %d closed windows checked", seed, len(checked))
		}
	}
}

// One event of the next window at one partition closes nothing: current
// is window W without it, last is W−1; once both partitions passed W's
// end, last is W.
func TestNextWindowEventAtOnePartition(t *testing.T) {
	clock := &windowtest.Clock{T: time.Unix(0, 0)}
	j := testJob(2, 10*time.Second, 0, 10*time.Second, clock)
	var seq uint64
	for i := range 50 {
		j.feed(0, &seq, windowtest.Event{Key: fmt.Sprint("a", i), TS: 10_100})
		j.feed(1, &seq, windowtest.Event{Key: fmt.Sprint("b", i), TS: 10_200})
	}
	j.feed(0, &seq, windowtest.Event{Key: "next", TS: 20_000})
	cur, last := j.count(synopsis.WindowCurrent), j.count(synopsis.WindowLast)
	if cur.Start != 10_000 || cur.Estimate != 100 || last.Start != 0 || last.Estimate != 0 {
		t.Fatalf("current from %d estimates %d, last from %d estimates %d; want 10000 with 100, 0 with 0", cur.Start, cur.Estimate, last.Start, last.Estimate)
	}
	j.feed(1, &seq, windowtest.Event{Key: "next", TS: 20_500})
	cur, last = j.count(synopsis.WindowCurrent), j.count(synopsis.WindowLast)
	if cur.Start != 20_000 || cur.Estimate != 1 || last.Start != 10_000 || last.Estimate != 100 {
		t.Fatalf("current from %d estimates %d, last from %d estimates %d; want 20000 with 1, 10000 with 100", cur.Start, cur.Estimate, last.Start, last.Estimate)
	}
}
