package runtime

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Latency buckets: upper bounds 10µs × 1.5^i, i = 0..latBuckets-2, plus
// +Inf; about 75 s at the top. A bucket's bound is within 50% of any value
// in it, which is what a p50/p99 on a dashboard needs.
const latBuckets = 41

var latBounds = func() []float64 {
	b := make([]float64, latBuckets-1)
	v := 10e-6
	for i := range b {
		b[i] = v
		v *= 1.5
	}
	return b
}()

// latencyHist counts latencies into fixed buckets with atomics, so many
// partitions can record without a lock, and a whole batch is one update.
type latencyHist struct {
	counts [latBuckets]atomic.Uint64
	sumNs  atomic.Uint64
}

func (h *latencyHist) observe(d time.Duration, n int) {
	s := d.Seconds()
	i := 0
	if s > latBounds[0] {
		// log base 1.5 of s/10µs, then fix rounding at the edges.
		i = int(math.Ceil(math.Log(s/10e-6) / math.Log(1.5)))
		if i > latBuckets-1 {
			i = latBuckets - 1
		}
		for i > 0 && s <= latBounds[i-1] {
			i--
		}
		for i < latBuckets-1 && s > latBounds[i] {
			i++
		}
	}
	h.counts[i].Add(uint64(n))
	h.sumNs.Add(uint64(d.Nanoseconds()) * uint64(n))
}

// latSnap is a copy of the cumulative counts at one moment.
type latSnap struct {
	counts [latBuckets]uint64
	sumNs  uint64
}

func (h *latencyHist) snap() latSnap {
	var s latSnap
	for i := range h.counts {
		s.counts[i] = h.counts[i].Load()
	}
	s.sumNs = h.sumNs.Load()
	return s
}

func (s latSnap) sub(o latSnap) latSnap {
	for i := range s.counts {
		s.counts[i] -= o.counts[i]
	}
	s.sumNs -= o.sumNs
	return s
}

func (s latSnap) total() uint64 {
	var n uint64
	for _, c := range s.counts {
		n += c
	}
	return n
}

// quantile estimates quantile q in milliseconds (0 with no observations).
// Inside its bucket the value is interpolated geometrically, since bucket
// bounds grow geometrically: reporting the bucket's upper bound instead
// would show p50 = p95 = p99 whenever they share a bucket.
func (s latSnap) quantile(q float64) float64 {
	n := s.total()
	if n == 0 {
		return 0
	}
	rank := q * float64(n)
	var below float64
	for i, x := range s.counts {
		if x == 0 {
			continue
		}
		if below+float64(x) >= rank {
			lo, hi := bucketRange(i)
			f := min(max((rank-below)/float64(x), 0), 1)
			return lo * math.Pow(hi/lo, f) * 1e3
		}
		below += float64(x)
	}
	return latBounds[len(latBounds)-1] * 1.5 * 1e3
}

// bucketRange is the range of latencies in bucket i, in seconds; the
// first bucket is taken to start a step below its bound, the last (+Inf)
// to end a step above the highest bound.
func bucketRange(i int) (lo, hi float64) {
	switch {
	case i == 0:
		return latBounds[0] / 1.5, latBounds[0]
	case i >= len(latBounds):
		return latBounds[len(latBounds)-1], latBounds[len(latBounds)-1] * 1.5
	}
	return latBounds[i-1], latBounds[i]
}

// Latency is the processing latency of recent events (queued to
// processed), in milliseconds.
type Latency struct {
	P50  float64 `json:"p50_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	Mean float64 `json:"mean_ms"`
}

func (s latSnap) latency() Latency {
	l := Latency{P50: sig3(s.quantile(0.5)), P95: sig3(s.quantile(0.95)), P99: sig3(s.quantile(0.99))}
	if n := s.total(); n > 0 {
		l.Mean = sig3(float64(s.sumNs) / float64(n) / 1e6)
	}
	return l
}

// sig3 rounds x to three significant digits: the estimates are not finer.
func sig3(x float64) float64 {
	if x == 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	p := math.Pow(10, 2-math.Floor(math.Log10(math.Abs(x))))
	return math.Round(x*p) / p
}

// sampleWindow is how far back rates and recent latencies look.
const sampleWindow = 10

// sampler keeps the last sampleWindow one-second samples of a job's
// counters, so rates and latency percentiles describe the recent past and
// not the whole run.
type sampler struct {
	mu      sync.Mutex
	samples [sampleWindow + 1]sample // ring, guarded by mu
	next    int
	filled  int
	hist    history // what recent said at each sample, guarded by mu
}

type sample struct {
	at                  time.Time
	accepted, processed uint64
	lat                 latSnap
	depth               int64        // queued events
	group               *GroupStatus // nil: no partitions
	ft                  *HistoryFT   // nil: no fault tolerance
	kind                []float64    // the kind's own series (Charting)
}

func (s *sampler) add(x sample) {
	s.mu.Lock()
	s.samples[s.next] = x
	s.next = (s.next + 1) % len(s.samples)
	if s.filled < len(s.samples) {
		s.filled++
	}
	s.hist.add(x.point(s.recentLocked()))
	s.mu.Unlock()
}

func (s *sampler) history() []HistoryPoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hist.oldestFirst()
}

// Rates are events per second over the sampling window.
type Rates struct {
	Accepted  float64 `json:"accepted_per_s"`
	Processed float64 `json:"processed_per_s"`
}

// recent compares the newest sample with the oldest in the window.
func (s *sampler) recent() (Rates, Latency) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recentLocked()
}

func (s *sampler) recentLocked() (Rates, Latency) {
	if s.filled < 2 {
		if s.filled == 1 {
			return Rates{}, s.samples[0].lat.latency()
		}
		return Rates{}, Latency{}
	}
	newest := s.samples[(s.next-1+len(s.samples))%len(s.samples)]
	oldest := s.samples[(s.next-s.filled+len(s.samples))%len(s.samples)]
	dt := newest.at.Sub(oldest.at).Seconds()
	var r Rates
	if dt > 0 {
		r.Accepted = float64(newest.accepted-oldest.accepted) / dt
		r.Processed = float64(newest.processed-oldest.processed) / dt
	}
	return r, newest.lat.sub(oldest.lat).latency()
}

// groups are the group statuses of the newest n+1 samples (fewer while the
// window fills), oldest first.
func (s *sampler) groups(n int) []*GroupStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := min(n+1, s.filled)
	out := make([]*GroupStatus, k)
	for i := range k {
		out[i] = s.samples[(s.next-k+i+2*len(s.samples))%len(s.samples)].group
	}
	return out
}

// AcceptedEvents counts the events this engine accepted (answered 202, or
// taken from a source) since it started, on every stream: a request's
// events once, however many jobs read its stream.
func (e *Engine) AcceptedEvents() uint64 { return e.metrics.acceptedEvents.Load() }
