package runtime

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Load shedding, opt-in per job (spec field shed): when an event would wait
// in its partition's queue longer than max_delay, part of the load is
// dropped at ingest, before it costs anything. logreg drops training
// (labelled) events only, so predictions are always answered; heavy
// hitters keep each event with probability p and count it with weight
// 1/p (randomized rounding), so counts stay unbiased, and their bounds
// widen by what was dropped and by the extra weight. Every shed event is
// counted: in the ingest response, the job's status and metrics.

// ShedSpec turns on load shedding for a job.
type ShedSpec struct {
	// MaxDelay is the longest an event should wait in a queue, such as
	// 50ms.
	MaxDelay string `json:"max_delay"`
}

// shedKinds are the kinds that can shed, and what they drop.
var shedKinds = map[string]string{
	"logreg":        "training events (labelled); predictions are always kept",
	"heavy_hitters": "events, keeping each with probability p and counting it 1/p times",
}

func (s *ShedSpec) validate(kind string) error {
	if s == nil {
		return nil
	}
	if _, ok := shedKinds[kind]; !ok {
		return &SpecError{"shed", fmt.Sprintf("kind %s cannot shed load without biasing its results (only logreg and heavy_hitters can; a join has params.sample)", kind)}
	}
	if _, err := s.delay(); err != nil {
		return err
	}
	return nil
}

func (s *ShedSpec) delay() (time.Duration, error) {
	d, err := time.ParseDuration(s.MaxDelay)
	if err != nil || d < time.Millisecond {
		return 0, &SpecError{"shed.max_delay", fmt.Sprintf("required: a duration of at least 1ms such as 50ms, got %q", s.MaxDelay)}
	}
	return d, nil
}

const (
	// shedHeadroom is the share of max_delay a queue is filled to: the
	// drain rate is an estimate, and the batch being processed waits too.
	shedHeadroom = 0.3
	// minKeep is the smallest share of events kept: a heavy hitter's
	// weight never exceeds 1/minKeep.
	minKeep = 0.01
)

// keepShare is the probability with which a partition keeps the sheddable
// events of n new ones, so that its queue holds no more than it drains in
// shedHeadroom × max_delay: 1 when there is room (or the drain rate is not
// known yet).
func (p *partition) keepShare(n, sheddable int, maxDelay time.Duration) float64 {
	rate := math.Float64frombits(p.rate.Load())
	if rate <= 0 || sheddable == 0 {
		return 1
	}
	// Closed loop: the drain rate counts only time the partition runs, so
	// on a machine whose CPU others take, events wait longer than it
	// predicts. When the recent waits were longer than the aim, the rate is
	// scaled down by as much.
	aim := maxDelay.Seconds() * shedHeadroom
	if wait := math.Float64frombits(p.wait.Load()); wait > aim {
		rate *= aim / wait
	}
	target := rate * aim
	room := target - float64(p.q.depth.Load()) - float64(n-sheddable)
	if room >= float64(sheddable) {
		return 1
	}
	return min(max(room/float64(sheddable), minKeep), 1)
}

// shedStats counts shed events (of a request, or, in shedCounters, of a
// job).
type shedStats struct {
	shed uint64 // events dropped
	// extra is the weight added to kept heavy-hitter events beyond 1 each
	// (Σ (w−1)): counts can be that much high, as dropped events can make
	// them that much low.
	extra uint64
}

// shedCounters are a job's totals; kinds that widen bounds read them.
type shedCounters struct{ shed, extra atomic.Uint64 }

func (c *shedCounters) add(s shedStats) {
	c.shed.Add(s.shed)
	c.extra.Add(s.extra)
}

// widen makes a top k's bounds hold despite shedding: a count may be
// high by the extra weight and low by the events dropped.
func (c *shedCounters) widen(t *TopK) {
	shed, extra := c.shed.Load(), c.extra.Load()
	if shed == 0 && extra == 0 {
		return
	}
	for i := range t.Items {
		it := &t.Items[i]
		it.Lower -= min(it.Lower, extra)
		it.Upper += shed
	}
	t.MaxUntracked += shed
	t.Shed, t.ExtraWeight = shed, extra
}

// shed drops part of the records queued for one partition of a job with
// shedding on, and returns those kept.
func (jb *jobBatch) shed(i int, maxDelay time.Duration) []Record {
	recs := jb.parts[i]
	hh := jb.job.spec.Kind == "heavy_hitters"
	sheddable := len(recs)
	if !hh {
		sheddable = 0
		for k := range recs {
			if recs[k].Label >= 0 {
				sheddable++
			}
		}
	}
	p := jb.job.parts[i].keepShare(len(recs), sheddable, maxDelay)
	if p >= 1 {
		return recs
	}
	kept := recs[:0]
	for _, r := range recs {
		if !hh && r.Label < 0 {
			kept = append(kept, r)
			continue
		}
		if rand.Float64() >= p {
			jb.shedStats.shed++
			continue
		}
		if hh {
			// Randomized rounding of 1/p: unbiased, integer.
			w := math.Floor(1 / p)
			if rand.Float64() < 1/p-w {
				w++
			}
			r.Value = w
			jb.shedStats.extra += uint64(w) - 1
		}
		kept = append(kept, r)
	}
	jb.parts[i] = kept
	return kept
}

// ShedStatus is a job's load shedding, in its status.
type ShedStatus struct {
	MaxDelay string `json:"max_delay"`
	Drops    string `json:"drops"`
	// Shed counts the events dropped, Fraction their share of all events
	// offered to the job.
	Shed     uint64  `json:"shed"`
	Fraction float64 `json:"fraction"`
	// ExtraWeight (heavy hitters) is the weight added to kept events: every
	// count may be that much high, and Shed that much low; the bounds of
	// top-k include both.
	ExtraWeight uint64 `json:"extra_weight,omitempty"`
}

func (j *Job) shedStatus() *ShedStatus {
	if j.spec.Shed == nil {
		return nil
	}
	st := &ShedStatus{MaxDelay: j.spec.Shed.MaxDelay, Drops: shedKinds[j.spec.Kind], Shed: j.shed.shed.Load(), ExtraWeight: j.shed.extra.Load()}
	if offered := j.accepted.Load() + st.Shed; offered > 0 {
		st.Fraction = float64(st.Shed) / float64(offered)
	}
	return st
}
