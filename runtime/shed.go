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
// dropped at ingest, before it costs anything. The kind's ShedPolicy says
// what may go: a learner drops training (labelled) events only, so
// predictions are always answered; a counting sketch keeps each event with
// probability p and counts it with weight 1/p (Reweight; randomized
// rounding), so counts stay unbiased, and its bounds widen by what was
// dropped and by the extra weight (ShedAware). Every shed event is
// counted: in the ingest response, the job's status and metrics.

// ShedSpec turns on load shedding for a job.
type ShedSpec struct {
	// MaxDelay is the longest an event should wait in a queue, such as
	// 50ms.
	MaxDelay string `json:"max_delay"`
}

func (s *ShedSpec) validate(kind *Kind) error {
	if s == nil {
		return nil
	}
	if kind.Shed == nil {
		return &SpecError{"shed", fmt.Sprintf("kind %s cannot shed load without biasing its results (only kinds %s can)", kind.Name,
			kindsWhere(func(k *Kind) bool { return k.Shed != nil }))}
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
	// minKeep is the smallest share of events kept: a reweighted event's
	// weight never exceeds 1/minKeep.
	minKeep = 0.01
)

// keepShare is the probability with which a partition keeps the sheddable
// events of n new ones, so that its queue holds no more than it drains in
// shedHeadroom × max_delay: 1 when there is room (or the drain rate is not
// known yet).
func (p *partition) keepShare(n, sheddable int) float64 {
	rate := math.Float64frombits(p.rate.Load())
	if rate <= 0 || sheddable == 0 {
		return 1
	}
	// Closed loop: the drain rate counts only time the partition runs, so
	// on a machine whose CPU others take, events wait longer than it
	// predicts. When the recent waits were longer than the aim, the rate is
	// scaled down by as much.
	aim := p.job.shedDelay.Seconds() * shedHeadroom
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
	// extra is the weight added to kept reweighted events beyond 1 each
	// (Σ (w−1)): counts can be that much high, as dropped events can make
	// them that much low.
	extra uint64
}

// shedCounters are a job's totals; kinds that widen bounds read them.
type shedCounters struct {
	shed, extra atomic.Uint64
	// late counts the shed events that had been accepted: dropped as their
	// partition reached them (staleKeep). They are in shed too.
	late atomic.Uint64
	// overdue counts the events served after waiting longer than max_delay
	// (queued to processed): what the bound promised and missed.
	overdue atomic.Uint64
}

// observeServed counts the n events of a batch served after waiting wait
// that waited longer than max_delay.
func (c *shedCounters) observeServed(wait, maxDelay time.Duration, n int) {
	if maxDelay > 0 && wait > maxDelay {
		c.overdue.Add(uint64(n))
	}
}

func (c *shedCounters) add(s shedStats) {
	c.shed.Add(s.shed)
	c.extra.Add(s.extra)
}

// Totals are the events shed and the weight added to kept events.
func (c *shedCounters) Totals() (shed, extra uint64) { return c.shed.Load(), c.extra.Load() }

// shed drops part of the records queued for one partition of a job with
// shedding on, and returns those kept.
func (jb *jobBatch) shed(i int) []Record {
	recs := jb.parts[i]
	pol := jb.job.kind.def().Shed
	p := jb.job.parts[i].keepShare(len(recs), sheddable(recs, pol))
	if p >= 1 {
		return recs
	}
	jb.parts[i] = keep(recs[:0], recs, p, pol, &jb.shedStats)
	return jb.parts[i]
}

// sheddable counts the events of recs that shedding may drop.
func sheddable(recs []Record, pol *ShedPolicy) int {
	if pol.Sheddable == nil {
		return len(recs)
	}
	n := 0
	for k := range recs {
		if pol.Sheddable(&recs[k]) {
			n++
		}
	}
	return n
}

// keep appends to dst the records of recs that shedding keeps when it
// keeps sheddable events with probability p, counting what it drops and
// the weight it adds in st. dst may be recs[:0].
func keep(dst, recs []Record, p float64, pol *ShedPolicy, st *shedStats) []Record {
	for _, r := range recs {
		if !pol.sheddable(&r) {
			dst = append(dst, r)
			continue
		}
		if rand.Float64() >= p {
			st.shed++
			continue
		}
		if pol.Reweight {
			// Randomized rounding of w/p (w the weight admission gave it,
			// 0 meaning 1): unbiased, integer.
			w0 := max(r.Value, 1)
			w := math.Floor(w0 / p)
			if rand.Float64() < w0/p-w {
				w++
			}
			r.Value = w
			st.extra += uint64(w - w0)
		}
		dst = append(dst, r)
	}
	return dst
}

// staleKeep is the share of a batch's sheddable events that its partition
// keeps when it reaches the batch after it waited age: load shedding's
// second line, behind admission at ingest. Admission works from the drain
// rate, an estimate; a machine can slow down after events were let in.
// Like CoDel, this looks at how long the batch really waited: up to
// max_delay/2 everything is kept, beyond it the share falls steeply
// ((max_delay/2 ÷ age)^4), so a backlog drains fast and what follows it
// waits less.
func staleKeep(age, maxDelay time.Duration) float64 {
	half := maxDelay / 2
	if age <= half {
		return 1
	}
	r := float64(half) / float64(age)
	return max(r*r*r*r, minKeep)
}

// shedStale applies staleKeep to batch b as partition p reaches it and
// returns the records to process: b.recs itself when all are kept (b.recs
// stays whole: the queue and the item log account by it).
func (p *partition) shedStale(b *batch, now time.Time) []Record {
	j := p.job
	if j.shedDelay == 0 {
		return b.recs
	}
	share := staleKeep(now.Sub(b.enqueued), j.shedDelay)
	if share >= 1 {
		return b.recs
	}
	var st shedStats
	p.kept = keep(p.kept[:0], b.recs, share, j.kind.def().Shed, &st)
	j.shed.add(st)
	j.shed.late.Add(st.shed)
	return p.kept
}

// ShedStatus is a job's load shedding, in its status.
type ShedStatus struct {
	MaxDelay string `json:"max_delay"`
	Drops    string `json:"drops"`
	// Shed counts the events dropped, Fraction their share of all events
	// offered to the job.
	Shed     uint64  `json:"shed"`
	Fraction float64 `json:"fraction"`
	// ExtraWeight (kinds that reweight) is the weight added to kept events: every
	// count may be that much high, and Shed that much low; the bounds of
	// top-k include both.
	ExtraWeight uint64 `json:"extra_weight,omitempty"`
	// Late counts the shed events that had been accepted (the ingest
	// response did not report them): dropped when their partition reached
	// them after waiting more than max_delay/2. They are in Shed too.
	Late uint64 `json:"late,omitempty"`
	// Overdue counts the events served after waiting longer than
	// max_delay (queued to processed): the bound missed, by as many events.
	Overdue uint64 `json:"overdue"`
}

func (j *Job) shedStatus() *ShedStatus {
	if j.spec.Shed == nil {
		return nil
	}
	st := &ShedStatus{MaxDelay: j.spec.Shed.MaxDelay, Drops: j.kind.def().Shed.Drops, Shed: j.shed.shed.Load(), ExtraWeight: j.shed.extra.Load(), Late: j.shed.late.Load(), Overdue: j.shed.overdue.Load()}
	if offered := j.accepted.Load() + st.Shed - st.Late; offered > 0 {
		st.Fraction = float64(st.Shed) / float64(offered)
	}
	return st
}
