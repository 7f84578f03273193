package runtime

import (
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"
)

// Group scheduling, after Drizzle (Venkataraman et al., "Drizzle: Fast
// and Adaptable Stream Processing at Scale", SOSP 2017): records move
// through a partition in batches (one per ingest request), while
// coordination (Operator.Coordinate: merging a partition's updates into a
// global model, publishing a partition's summary for queries) happens
// once per group of batches. The group size adapts so that the
// time spent coordinating stays within [low, high] of the group's time.

// SyncSpec is a job's coordination section. Zero fields take defaults.
type SyncSpec struct {
	// Every is the group size in batches: "auto" (the default) adapts it,
	// a number fixes it.
	Every any `json:"every,omitempty"`
	// Overhead is [low, high]: the share of time a group may spend
	// coordinating (default [0.05, 0.10]).
	Overhead []float64 `json:"overhead,omitempty"`
	// MaxGroup clamps the group size (default 1024 batches).
	MaxGroup int `json:"max_group,omitempty"`
	// MaxDelay coordinates at least this often, whatever the group size
	// (default 100ms): queries and predictions never see older state.
	MaxDelay string `json:"max_delay,omitempty"`
	// Consistency of the kind's rounds (Kind.Consistent, e.g. model
	// averaging): async (default), bsp or ssp.
	Consistency string `json:"consistency,omitempty"`
	// Staleness is how many groups an ssp partition may run ahead of the
	// slowest busy one (default 3).
	Staleness int `json:"staleness,omitempty"`
	// RemoteSilence (bsp and ssp, cluster mode) is how long a partition
	// another node runs may send nothing before it counts as idle
	// (default 4s, DefaultRemoteSilence): the longest the survivors of a
	// dead node wait for its partitions.
	RemoteSilence string `json:"remote_silence,omitempty"`
}

// Bounds of SyncSpec.RemoteSilence: above a group's time (a busy remote
// partition is not dropped between its deltas), and not so long that a
// dead node holds the others back for minutes.
const (
	minRemoteSilence = 100 * time.Millisecond
	maxRemoteSilence = 10 * time.Minute
)

// RemoteSilenceOf is spec's remote silence (validated: its default when
// unset).
func RemoteSilenceOf(s SyncSpec) time.Duration {
	d, err := time.ParseDuration(s.RemoteSilence)
	if err != nil {
		return DefaultRemoteSilence
	}
	return d
}

// Consistency models of model averaging.
const (
	ConsistencyAsync = "async"
	ConsistencyBSP   = "bsp"
	ConsistencySSP   = "ssp"
)

// groupConfig is a validated SyncSpec.
type groupConfig struct {
	auto      bool
	fixed     int
	low, high float64
	max       int
	maxDelay  time.Duration
}

func (s *SyncSpec) validate(kind *Kind) (groupConfig, error) {
	g := groupConfig{auto: true, low: 0.05, high: 0.10, max: 1024, maxDelay: 100 * time.Millisecond}
	switch v := s.Every.(type) {
	case nil:
		s.Every = "auto"
	case string:
		if v != "auto" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return g, &SpecError{"sync.every", fmt.Sprintf(`must be "auto" or a group size of at least 1 batch, got %q`, v)}
			}
			g.auto, g.fixed = false, n
			s.Every = n
		}
	default:
		f, ok := number(v)
		if !ok || f != math.Trunc(f) || f < 1 || f > 1<<20 {
			return g, &SpecError{"sync.every", fmt.Sprintf(`must be "auto" or a group size in [1, %d] batches, got %v`, 1<<20, v)}
		}
		g.auto, g.fixed = false, int(f)
		s.Every = int(f)
	}
	switch len(s.Overhead) {
	case 0:
		s.Overhead = []float64{g.low, g.high}
	case 2:
		g.low, g.high = s.Overhead[0], s.Overhead[1]
		if !(g.low > 0 && g.low < g.high && g.high < 1) {
			return g, &SpecError{"sync.overhead", fmt.Sprintf("must be [low, high] with 0 < low < high < 1, got %v", s.Overhead)}
		}
	default:
		return g, &SpecError{"sync.overhead", fmt.Sprintf("must be [low, high], got %d numbers", len(s.Overhead))}
	}
	if s.MaxGroup == 0 {
		s.MaxGroup = g.max
	}
	if s.MaxGroup < 1 || s.MaxGroup > 1<<20 {
		return g, &SpecError{"sync.max_group", fmt.Sprintf("must be in [1, %d] batches, got %d", 1<<20, s.MaxGroup)}
	}
	g.max = s.MaxGroup
	if s.MaxDelay == "" {
		s.MaxDelay = g.maxDelay.String()
	}
	d, err := time.ParseDuration(s.MaxDelay)
	if err != nil || d < time.Millisecond {
		return g, &SpecError{"sync.max_delay", fmt.Sprintf("must be a duration of at least 1ms such as 100ms, got %q", s.MaxDelay)}
	}
	g.maxDelay = d
	if s.Consistency == "" {
		s.Consistency = ConsistencyAsync
	}
	switch s.Consistency {
	case ConsistencyAsync, ConsistencyBSP, ConsistencySSP:
	default:
		return g, &SpecError{"sync.consistency", fmt.Sprintf("must be async, bsp or ssp, got %q", s.Consistency)}
	}
	if s.Consistency != ConsistencyAsync && !kind.Consistent {
		return g, &SpecError{"sync.consistency", fmt.Sprintf("%s applies to consistency rounds (kinds %s), not to kind %s", s.Consistency,
			kindsWhere(func(k *Kind) bool { return k.Consistent }), kind.Name)}
	}
	if s.Staleness < 0 {
		return g, &SpecError{"sync.staleness", fmt.Sprintf("must not be negative, got %d", s.Staleness)}
	}
	if s.Consistency == ConsistencySSP && s.Staleness == 0 {
		s.Staleness = 3
	}
	if s.Consistency != ConsistencySSP && s.Staleness != 0 {
		return g, &SpecError{"sync.staleness", "only for consistency ssp"}
	}
	return g, s.validateRemoteSilence()
}

func (s *SyncSpec) validateRemoteSilence() error {
	if s.Consistency == ConsistencyAsync {
		if s.RemoteSilence != "" {
			return &SpecError{"sync.remote_silence", "only for consistency bsp or ssp"}
		}
		return nil
	}
	if s.RemoteSilence == "" {
		s.RemoteSilence = DefaultRemoteSilence.String()
	}
	d, err := time.ParseDuration(s.RemoteSilence)
	if err != nil || d < minRemoteSilence || d > maxRemoteSilence {
		return &SpecError{"sync.remote_silence", fmt.Sprintf("must be a duration in [%s, %s] such as 4s, got %q", minRemoteSilence, maxRemoteSilence, s.RemoteSilence)}
	}
	return nil
}

// groupSizer decides, batch by batch, when a partition coordinates, and
// adapts the group size to the overhead it measures: it doubles when the
// overhead of a group is above high (multiplicative increase) and shrinks
// by a quarter when below low (a slower decrease), within [1, max]. Used by
// the partition goroutine only; the published fields are atomics.
type groupSizer struct {
	cfg     groupConfig
	size    int
	batches int
	work    time.Duration // processing time of the batches in this group
	last    time.Time     // end of the last coordination

	pubSize     atomic.Int64
	pubOverhead atomic.Uint64 // float64 bits: of the last group
	groups      atomic.Uint64
	coordNs     atomic.Int64 // total time coordinating
	workNs      atomic.Int64 // total time processing
}

func newGroupSizer(cfg groupConfig, now time.Time) *groupSizer {
	g := &groupSizer{cfg: cfg, last: now}
	g.restart()
	return g
}

// restart drops to the smallest group: at start and after a recovery,
// when state must be coordinated (and backed up) soon.
func (g *groupSizer) restart() {
	g.size = 1
	if !g.cfg.auto {
		g.size = g.cfg.fixed
	}
	g.pubSize.Store(int64(g.size))
}

// batchDone records a processed batch and reports whether the group is
// complete: size batches, or max_delay since the last coordination.
func (g *groupSizer) batchDone(d time.Duration, now time.Time) bool {
	g.batches++
	g.work += d
	return g.batches >= g.size || now.Sub(g.last) >= g.cfg.maxDelay
}

// coordinated records the time the group's coordination took and adapts
// the size.
func (g *groupSizer) coordinated(c time.Duration, now time.Time) {
	overhead := 0.0
	if total := g.work + c; total > 0 {
		overhead = float64(c) / float64(total)
	}
	g.pubOverhead.Store(math.Float64bits(overhead))
	g.groups.Add(1)
	g.coordNs.Add(int64(c))
	g.workNs.Add(int64(g.work))
	if g.cfg.auto {
		g.size = adapt(g.size, overhead, g.cfg)
		g.pubSize.Store(int64(g.size))
	}
	g.batches, g.work, g.last = 0, 0, now
}

// idle ends a group without measuring it: the queue ran dry, and the
// coordination that follows costs no one anything.
func (g *groupSizer) idle(now time.Time) {
	g.workNs.Add(int64(g.work))
	g.batches, g.work, g.last = 0, 0, now
}

// adapt is the controller: grow fast above high, shrink slowly below low.
func adapt(size int, overhead float64, cfg groupConfig) int {
	switch {
	case overhead > cfg.high:
		size *= 2
	case overhead < cfg.low:
		size -= max(1, size/4)
	}
	return min(max(size, 1), cfg.max)
}

// GroupStatus is a partition's (or, summed, a job's) group scheduling.
type GroupStatus struct {
	Mode string `json:"mode"` // auto or fixed
	// Size is the current group size in batches (a job's: the mean over
	// partitions); Overhead the share of its last group's time spent
	// coordinating (a job's: the mean).
	Size     float64 `json:"size"`
	Overhead float64 `json:"overhead"`
	Low      float64 `json:"low"`
	High     float64 `json:"high"`
	Groups   uint64  `json:"groups"`
	// TotalOverhead is the share of all processing and coordination time
	// spent coordinating since the start.
	TotalOverhead float64 `json:"total_overhead"`

	// coordNs and workNs are the totals TotalOverhead is made of: two
	// samples' give the overhead between them (health.go).
	coordNs, workNs int64
}

func (g *groupSizer) status() GroupStatus {
	st := GroupStatus{Mode: "auto", Size: float64(g.pubSize.Load()), Overhead: math.Float64frombits(g.pubOverhead.Load()),
		Low: g.cfg.low, High: g.cfg.high, Groups: g.groups.Load()}
	if !g.cfg.auto {
		st.Mode = "fixed"
	}
	st.coordNs, st.workNs = g.coordNs.Load(), g.workNs.Load()
	if c, w := st.coordNs, st.workNs; c+w > 0 {
		st.TotalOverhead = float64(c) / float64(c+w)
	}
	return st
}

// jobGroupStatus sums the partitions' group status into the job's.
func jobGroupStatus(parts []*partition) *GroupStatus {
	if len(parts) == 0 {
		return nil
	}
	st := parts[0].group.status()
	st.Size, st.Overhead, st.Groups = 0, 0, 0
	var c, w int64
	for _, p := range parts {
		ps := p.group.status()
		st.Size += ps.Size / float64(len(parts))
		st.Overhead += ps.Overhead / float64(len(parts))
		st.Groups += ps.Groups
		c += p.group.coordNs.Load()
		w += p.group.workNs.Load()
	}
	st.TotalOverhead, st.coordNs, st.workNs = 0, c, w
	if c+w > 0 {
		st.TotalOverhead = float64(c) / float64(c+w)
	}
	return &st
}
