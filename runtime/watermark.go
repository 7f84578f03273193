package runtime

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Clock is the wall-clock time a job measures idleness by; nil means
// time.Now. It is the one seam tests turn to make idleness deterministic.
type Clock func() time.Time

// Watermark is a job's event-time watermark, for kinds whose partitions
// each keep their own windows (Flink's model): the least, over the
// partitions that are not idle, of the largest event time each has seen,
// less the allowed lateness. It only moves forward. A window closes when
// the watermark passes its end. A partition that has processed no event
// for the idle timeout (by the clock) is left out of the least, as Flink's
// withIdleness, so that one quiet partition does not hold every window
// open; its later events behind the watermark are late.
//
// Partitions report with Partition.Observe (atomic stores, once a batch:
// no clock on the hot path); Advance, from queries and the engine's
// once-a-second sampler, reads the clock and recomputes.
type Watermark struct {
	lateness int64 // ms
	idle     time.Duration
	clock    Clock

	mu    sync.Mutex
	parts []*PartitionTime
	idles []int // partitions left out at the last Advance
	wm    atomic.Int64
	has   atomic.Bool
}

// PartitionTime is one partition's report to its job's watermark.
type PartitionTime struct {
	maxTS  atomic.Int64
	hasMax atomic.Bool
	events atomic.Uint64
	// seen and active are Advance's, under Watermark.mu: the event count
	// at the last Advance, and when it last changed.
	seen   uint64
	active time.Time
}

// NewWatermark returns the watermark of a job whose windows allow
// lateness, leaving a partition out after idle without events (0: never).
func NewWatermark(lateness, idle time.Duration, clock Clock) *Watermark {
	if clock == nil {
		clock = time.Now
	}
	return &Watermark{lateness: lateness.Milliseconds(), idle: idle, clock: clock}
}

// Partition adds a partition, active from now.
func (w *Watermark) Partition() *PartitionTime {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := &PartitionTime{active: w.clock()}
	w.parts = append(w.parts, p)
	return p
}

// Observe reports the partition's largest event time (ok false: none yet)
// and the count of events it has processed, after a batch.
func (p *PartitionTime) Observe(maxTS int64, ok bool, events uint64) {
	if ok && (!p.hasMax.Load() || maxTS > p.maxTS.Load()) {
		p.maxTS.Store(maxTS)
		p.hasMax.Store(true)
	}
	p.events.Store(events)
}

// Current is the watermark as of the last Advance (ok false: none yet, as
// while an active partition has seen no event).
func (w *Watermark) Current() (wm int64, ok bool) {
	if !w.has.Load() {
		return 0, false
	}
	return w.wm.Load(), true
}

// Advance recomputes the watermark at the clock's time and returns it.
func (w *Watermark) Advance() (wm int64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock()
	least, any, none := int64(math.MaxInt64), false, false
	w.idles = w.idles[:0]
	for i, p := range w.parts {
		if n := p.events.Load(); n != p.seen {
			p.seen, p.active = n, now
		}
		if w.idle > 0 && now.Sub(p.active) >= w.idle {
			w.idles = append(w.idles, i)
			continue
		}
		any = true
		if !p.hasMax.Load() {
			none = true
			continue
		}
		least = min(least, p.maxTS.Load())
	}
	if any && !none {
		if c := least - w.lateness; !w.has.Load() || c > w.wm.Load() {
			w.wm.Store(c)
			w.has.Store(true)
		}
	}
	return w.Current()
}

// Idle lists the partitions left out at the last Advance.
func (w *Watermark) Idle() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.idles...)
}

// Seed starts the watermark at wm (a rescaled job's, from the job it
// replaces): it never goes back.
func (w *Watermark) Seed(wm int64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ok && (!w.has.Load() || wm > w.wm.Load()) {
		w.wm.Store(wm)
		w.has.Store(true)
	}
}

// Lateness is the allowed lateness.
func (w *Watermark) Lateness() time.Duration { return time.Duration(w.lateness) * time.Millisecond }

// IdleTimeout is the idle timeout (0: none).
func (w *Watermark) IdleTimeout() time.Duration { return w.idle }
