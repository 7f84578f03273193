package learners

import "math"

// AUCBins is the number of equal-width bins of predicted probability used
// for AUC. Two predictions in the same bin (within 1/1024 of each other,
// roughly) count as a tie (half a concordant pair), so the AUC is exact up
// to the share of positive-negative pairs that fall in the same bin, times
// one half.
const AUCBins = 1024

// LogLossEps clamps probabilities to [LogLossEps, 1-LogLossEps] in the log
// loss, so one confident mistake costs at most about 34.5.
const LogLossEps = 1e-15

// Measures are progressive validation measures over a set of events. With
// no events every value is 0. AUC is 0 when it is undefined (no positive or
// no negative event). A prediction counts as positive when p > 0.5.
type Measures struct {
	Count     int64   `json:"count"`
	Positives int64   `json:"positives"`
	Accuracy  float64 `json:"accuracy"`
	LogLoss   float64 `json:"log_loss"`
	AUC       float64 `json:"auc"`
}

// Metrics are the measures over the whole run and over the recent window.
type Metrics struct {
	All    Measures `json:"all"`
	Recent Measures `json:"recent"`
}

// agg holds additive counts over a set of events.
type agg struct {
	count, positives, correct int64
	loss                      float64
	pos, neg                  [AUCBins]int64
}

func (a *agg) add(o *agg) {
	a.count += o.count
	a.positives += o.positives
	a.correct += o.correct
	a.loss += o.loss
	for i := range a.pos {
		a.pos[i] += o.pos[i]
		a.neg[i] += o.neg[i]
	}
}

// ringEntry is one event of the recent window.
type ringEntry struct {
	loss    float32
	bin     uint16
	label   bool
	correct bool
}

// Progressive accumulates progressive validation measures (accuracy, log
// loss and AUC) over the whole run and over the last window events. Observe
// is O(1) and does not allocate. A Progressive is a plain value, not safe
// for concurrent use; publish a Clone to readers.
type Progressive struct {
	window int
	all    agg
	recent agg // the events in ring
	merged agg // recent-window counts merged in from other Progressives
	ring   []ringEntry
	next   int
	full   bool
}

// NewProgressive returns an empty Progressive with a recent window of
// window events (DefaultWindow if window <= 0).
func NewProgressive(window int) *Progressive {
	if window <= 0 {
		window = DefaultWindow
	}
	return &Progressive{window: window, ring: make([]ringEntry, window)}
}

func probBin(p float64) int {
	b := int(p * AUCBins)
	if b < 0 || p != p {
		return 0
	}
	if b >= AUCBins {
		return AUCBins - 1
	}
	return b
}

func logLoss(p float64, label bool) float64 {
	p = min(max(p, LogLossEps), 1-LogLossEps)
	if label {
		return -math.Log(p)
	}
	return -math.Log(1 - p)
}

// Observe records one prediction p of the probability of a positive label
// and the true label. A NaN p counts as 0.5.
func (p *Progressive) Observe(prob float64, label bool) {
	if prob != prob {
		prob = 0.5
	}
	e := ringEntry{
		loss:    float32(logLoss(prob, label)),
		bin:     uint16(probBin(prob)),
		label:   label,
		correct: (prob > 0.5) == label,
	}
	p.all.observe(e, 1)
	if p.full {
		p.recent.observe(p.ring[p.next], -1)
	}
	p.ring[p.next] = e
	p.recent.observe(e, 1)
	p.next++
	if p.next == len(p.ring) {
		p.next = 0
		p.full = true
		// Recompute the window's loss sum once per window, so rounding
		// errors of adding and subtracting do not accumulate (amortized O(1)).
		var s float64
		for _, r := range p.ring {
			s += float64(r.loss)
		}
		p.recent.loss = s
	}
}

func (a *agg) observe(e ringEntry, d int64) {
	a.count += d
	a.loss += float64(d) * float64(e.loss)
	if e.correct {
		a.correct += d
	}
	if e.label {
		a.positives += d
		a.pos[e.bin] += d
	} else {
		a.neg[e.bin] += d
	}
}

// Merge adds the counts of o (another partition's Progressive) to p: o's
// whole run to p's whole run, and o's recent window to p's recent window.
// After merging P partitions the recent measures cover the last Window events
// of each of them. Merged recent counts never leave p's window (they are
// kept apart from p's own ring), so p may go on observing; to get a fresh
// job-level view, merge Clones of the partitions into a NewProgressive.
func (p *Progressive) Merge(o *Progressive) {
	p.all.add(&o.all)
	p.merged.add(&o.recent)
	p.merged.add(&o.merged)
}

// Clone returns a deep copy of p.
func (p *Progressive) Clone() *Progressive {
	c := *p
	c.ring = append([]ringEntry(nil), p.ring...)
	return &c
}

// CopyTo makes dst a deep copy of p, reusing dst's memory: publishing a
// partition's metrics at every idle moment then allocates nothing.
func (p *Progressive) CopyTo(dst *Progressive) {
	ring := dst.ring[:0]
	*dst = *p
	dst.ring = append(ring, p.ring...)
}

// Window returns the size of the recent window.
func (p *Progressive) Window() int { return p.window }

// Summary returns the measures over the whole run and the recent window.
func (p *Progressive) Summary() Metrics {
	return Metrics{All: measures(&p.all, nil), Recent: measures(&p.recent, &p.merged)}
}

// measures computes the measures of a (plus b if not nil).
func measures(a, b *agg) Measures {
	m := Measures{Count: a.count, Positives: a.positives}
	correct, loss := a.correct, a.loss
	if b != nil {
		m.Count += b.count
		m.Positives += b.positives
		correct += b.correct
		loss += b.loss
	}
	if m.Count == 0 {
		return m
	}
	m.Accuracy = float64(correct) / float64(m.Count)
	m.LogLoss = max(loss, 0) / float64(m.Count)
	neg := m.Count - m.Positives
	if m.Positives == 0 || neg == 0 {
		return m
	}
	// AUC = P(p+ > p-) + P(p+ == p-)/2, with ties within a bin.
	var below, conc float64 // negatives in lower bins; concordant pairs
	for i := 0; i < AUCBins; i++ {
		np, nn := a.pos[i], a.neg[i]
		if b != nil {
			np += b.pos[i]
			nn += b.neg[i]
		}
		conc += float64(np) * (below + 0.5*float64(nn))
		below += float64(nn)
	}
	m.AUC = conc / (float64(m.Positives) * float64(neg))
	return m
}
