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
// Partitions report with PartitionTime.Observe and read Current once a
// batch (atomics only: no clock, no lock on the hot path); Advance, from
// queries and the engine's once-a-second sampler, reads the clock to tell
// which partitions are idle.
type Watermark struct {
	lateness int64 // ms
	idle     time.Duration
	clock    Clock

	parts atomic.Pointer[[]*PartitionTime] // copied on write
	wm    atomic.Int64                     // none: math.MinInt64

	mu    sync.Mutex // Advance's
	idles []int      // partitions left out at the last Advance
}

// PartitionTime is one partition's report to its job's watermark.
type PartitionTime struct {
	maxTS  atomic.Int64
	hasMax atomic.Bool
	events atomic.Uint64
	idle   atomic.Bool // left out of the least, until its next events
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
	w := &Watermark{lateness: lateness.Milliseconds(), idle: idle, clock: clock}
	w.wm.Store(none)
	return w
}

// none is the watermark before there is one.
const none = math.MinInt64

// Partition adds a partition, active from now.
func (w *Watermark) Partition() *PartitionTime {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := &PartitionTime{active: w.clock()}
	var parts []*PartitionTime
	if old := w.parts.Load(); old != nil {
		parts = append(parts, *old...)
	}
	parts = append(parts, p)
	w.parts.Store(&parts)
	return p
}

func (w *Watermark) partitions() []*PartitionTime {
	if p := w.parts.Load(); p != nil {
		return *p
	}
	return nil
}

// Observe reports the partition's largest event time (ok false: none yet)
// and the count of events it has processed, after a batch.
func (p *PartitionTime) Observe(maxTS int64, ok bool, events uint64) {
	if ok && (!p.hasMax.Load() || maxTS > p.maxTS.Load()) {
		p.maxTS.Store(maxTS)
		p.hasMax.Store(true)
	}
	if p.events.Swap(events) != events && p.idle.Load() {
		p.idle.Store(false)
	}
}

// Current is the watermark (ok false: none yet, as while a partition
// that is not idle has seen no event): the least of the partitions'
// largest event times less the lateness, or what it was, if more.
func (w *Watermark) Current() (wm int64, ok bool) {
	least, active, unseen := int64(math.MaxInt64), false, false
	for _, p := range w.partitions() {
		if p.idle.Load() {
			continue
		}
		active = true
		if !p.hasMax.Load() {
			unseen = true
			break
		}
		least = min(least, p.maxTS.Load())
	}
	if active && !unseen {
		c := max(least-w.lateness, none+1)
		for old := w.wm.Load(); c > old && !w.wm.CompareAndSwap(old, c); old = w.wm.Load() {
		}
	}
	if wm = w.wm.Load(); wm == none {
		return 0, false
	}
	return wm, true
}

// Advance tells by the clock which partitions are idle and returns the
// watermark.
func (w *Watermark) Advance() (wm int64, ok bool) {
	w.mu.Lock()
	now := w.clock()
	w.idles = w.idles[:0]
	for i, p := range w.partitions() {
		if n := p.events.Load(); n != p.seen {
			p.seen, p.active = n, now
		}
		idle := w.idle > 0 && now.Sub(p.active) >= w.idle
		p.idle.Store(idle)
		if idle {
			w.idles = append(w.idles, i)
		}
	}
	w.mu.Unlock()
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
	for old := w.wm.Load(); ok && wm > old && !w.wm.CompareAndSwap(old, wm); old = w.wm.Load() {
	}
}

// Lateness is the allowed lateness.
func (w *Watermark) Lateness() time.Duration { return time.Duration(w.lateness) * time.Millisecond }

// IdleTimeout is the idle timeout (0: none).
func (w *Watermark) IdleTimeout() time.Duration { return w.idle }
