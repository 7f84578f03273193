// Package windowtest drives the windowed synopsis kinds' partitions in
// tests: random multi-partition streams with bounded disorder, fed in a
// random interleaving across partitions, and the exact counts of each
// window to check the merged answers against.
package windowtest

import (
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/mlstream/mlstream/kinds/internal/synopsis"
	"github.com/mlstream/mlstream/runtime"
)

// Event is one event of a partition's stream.
type Event struct {
	Key string
	TS  int64 // ms
}

// Stream is n events spread over parts partitions at random: event times
// rise by 0..2·step ms an event from t0, and each may lie up to disorder
// ms behind the largest before it; keys are skewed over a universe of
// keys. Each partition's events are in the order made, so each is behind
// its own partition's largest time by at most disorder.
func Stream(r *rand.Rand, n, parts int, t0, step, disorder int64, keys int) [][]Event {
	out := make([][]Event, parts)
	now := t0
	for range n {
		now += r.Int64N(2*step + 1)
		ts := now - r.Int64N(disorder+1)
		k := int(float64(keys) * r.Float64() * r.Float64()) // skewed to small keys
		p := r.IntN(parts)
		out[p] = append(out[p], Event{Key: "k" + strconv.Itoa(k), TS: ts})
	}
	return out
}

// Windows holds the exact counts of events by window and key.
type Windows struct {
	Size   int64
	Counts map[int64]map[string]uint64 // by window start
}

// NewWindows counts windows of size ms.
func NewWindows(size int64) *Windows {
	return &Windows{Size: size, Counts: map[int64]map[string]uint64{}}
}

// Start is the start of the window of ts.
func (w *Windows) Start(ts int64) int64 {
	q := ts / w.Size
	if ts%w.Size != 0 && ts < 0 {
		q--
	}
	return q * w.Size
}

// Add counts an event.
func (w *Windows) Add(e Event) {
	s := w.Start(e.TS)
	if w.Counts[s] == nil {
		w.Counts[s] = map[string]uint64{}
	}
	w.Counts[s][e.Key]++
}

// Total is the events of the window that starts at start.
func (w *Windows) Total(start int64) uint64 {
	var n uint64
	for _, c := range w.Counts[start] {
		n += c
	}
	return n
}

// All counts every event of the streams.
func All(streams [][]Event, size int64) *Windows {
	w := NewWindows(size)
	for _, s := range streams {
		for _, e := range s {
			w.Add(e)
		}
	}
	return w
}

// State is what Run has fed so far.
type State struct {
	Seen   *Windows // the events processed
	MaxTS  []int64  // each partition's largest event time
	HasMax []bool
}

// Watermark is the least over the partitions of their largest event time,
// less lateness; ok false while a partition has seen no event.
func (s *State) Watermark(lateness int64) (wm int64, ok bool) {
	for i, m := range s.MaxTS {
		if !s.HasMax[i] {
			return 0, false
		}
		if i == 0 || m < wm {
			wm = m
		}
	}
	return wm - lateness, len(s.MaxTS) > 0
}

// Run feeds each partition its events in order, in batches of 1..maxBatch,
// the partition of each batch chosen at random, and calls after once each
// batch was processed; st counts windows of size ms.
func Run(r *rand.Rand, streams [][]Event, size int64, maxBatch int, process func(part int, evs []Event), after func(st *State)) {
	st := &State{Seen: NewWindows(size), MaxTS: make([]int64, len(streams)), HasMax: make([]bool, len(streams))}
	next := make([]int, len(streams))
	left := 0
	for _, s := range streams {
		left += len(s)
	}
	for left > 0 {
		p := r.IntN(len(streams))
		s := streams[p][next[p]:]
		if len(s) == 0 {
			continue
		}
		b := s[:min(len(s), 1+r.IntN(maxBatch))]
		next[p] += len(b)
		left -= len(b)
		process(p, b)
		for _, e := range b {
			st.Seen.Add(e)
			if !st.HasMax[p] || e.TS > st.MaxTS[p] {
				st.MaxTS[p], st.HasMax[p] = e.TS, true
			}
		}
		after(st)
	}
}

// Records are the runtime's records of events: the key as the one value.
func Records(evs []Event, seq *uint64) []runtime.Record {
	out := make([]runtime.Record, len(evs))
	for i, e := range evs {
		*seq++
		out[i] = runtime.Record{Seq: *seq, TS: e.TS, Label: -1, Values: []string{e.Key}}
	}
	return out
}

// Clock is a clock tests move by hand.
type Clock struct{ T time.Time }

// Now is the clock's time.
func (c *Clock) Now() time.Time { return c.T }

// Params are a test job's shared params: windows of size, keep 3, room
// for 16 open windows a partition, on lateness and idle.
func Params(field string, size, lateness, idle time.Duration) synopsis.Params {
	return synopsis.Params{Field: field, Window: size, Keep: 3, Open: 16, Lateness: lateness, Idle: idle}
}

// Feed processes events at a partition's operator and publishes them.
func Feed(op runtime.Operator, seq *uint64, evs ...Event) {
	op.Process(Records(evs, seq), false)
	op.Coordinate()
}
