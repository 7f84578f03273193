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

// CalibrationBins is the number of equal-width bins of predicted
// probability in the calibration table.
const CalibrationBins = 10

// Measures are progressive validation measures over a set of events. With
// no events every value is 0. AUC is 0 when it is undefined (no positive or
// no negative event). A prediction counts as positive when p > 0.5 (the
// decision threshold); TP, FP, FN and TN count the events by that decision
// and the label. Precision, recall and F1 are 0 when undefined (no
// predicted positive, no positive, or both 0).
type Measures struct {
	Count       int64                           `json:"count"`
	Positives   int64                           `json:"positives"`
	Accuracy    float64                         `json:"accuracy"`
	LogLoss     float64                         `json:"log_loss"`
	AUC         float64                         `json:"auc"`
	TP          int64                           `json:"tp"`
	FP          int64                           `json:"fp"`
	FN          int64                           `json:"fn"`
	TN          int64                           `json:"tn"`
	Precision   float64                         `json:"precision"`
	Recall      float64                         `json:"recall"`
	F1          float64                         `json:"f1"`
	Calibration [CalibrationBins]CalibrationBin `json:"calibration"`
}

// CalibrationBin compares, for the events whose predicted probability fell
// in [Lo, Hi) (the last bin includes 1), the mean prediction with the
// observed rate of positives. A well calibrated model has them close.
// Both are 0 in an empty bin.
type CalibrationBin struct {
	Lo            float64 `json:"lo"`
	Hi            float64 `json:"hi"`
	Count         int64   `json:"count"`
	MeanPredicted float64 `json:"mean_predicted"`
	ObservedRate  float64 `json:"observed_rate"`
}

// Metrics are the measures over the whole run and over the recent window.
type Metrics struct {
	All    Measures `json:"all"`
	Recent Measures `json:"recent"`
}

// agg holds additive counts over a set of events.
type agg struct {
	count, positives, correct int64
	truePos, predPos          int64 // labelled positive and predicted positive; predicted positive
	loss                      float64
	pos, neg                  [AUCBins]int64
	cal                       [CalibrationBins]calBin
}

// calBin is one bin of the calibration table: events, their summed
// predictions, and the positives among them.
type calBin struct {
	count, positives int64
	sumP             float64
}

func (a *agg) add(o *agg) {
	a.count += o.count
	a.positives += o.positives
	a.correct += o.correct
	a.truePos += o.truePos
	a.predPos += o.predPos
	a.loss += o.loss
	for i := range a.pos {
		a.pos[i] += o.pos[i]
		a.neg[i] += o.neg[i]
	}
	for i := range a.cal {
		a.cal[i].count += o.cal[i].count
		a.cal[i].positives += o.cal[i].positives
		a.cal[i].sumP += o.cal[i].sumP
	}
}

// ringEntry is one event of the recent window. The prediction is kept as
// a float32 so that leaving the window subtracts exactly what entering it
// added to the calibration sums.
type ringEntry struct {
	loss  float32
	prob  float32
	bin   uint16 // of AUC
	flags uint8  // flagLabel, flagCorrect
	cal   uint8  // calibration bin, of the float64 prediction
}

const (
	flagLabel   = 1
	flagCorrect = 2
)

func (e *ringEntry) label() bool   { return e.flags&flagLabel != 0 }
func (e *ringEntry) correct() bool { return e.flags&flagCorrect != 0 }

// predicted reports the decision at the threshold: with the label and
// whether the decision was correct, it is exact whatever the rounding.
func (e *ringEntry) predicted() bool { return e.label() == e.correct() }

func calIndex(p float64) int {
	if p != p {
		return 0
	}
	return min(max(int(p*CalibrationBins), 0), CalibrationBins-1)
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
		loss: float32(logLoss(prob, label)),
		prob: float32(prob),
		bin:  uint16(probBin(prob)),
		cal:  uint8(calIndex(prob)),
	}
	if label {
		e.flags |= flagLabel
	}
	if (prob > 0.5) == label {
		e.flags |= flagCorrect
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
		p.recent.resum(p.ring)
	}
}

// resum recomputes the window's float sums once per window, so rounding
// errors of adding and subtracting do not accumulate (amortized O(1)).
func (a *agg) resum(ring []ringEntry) {
	var s float64
	var cal [CalibrationBins]float64
	for i := range ring {
		r := &ring[i]
		s += float64(r.loss)
		cal[r.cal] += float64(r.prob)
	}
	a.loss = s
	for i := range a.cal {
		a.cal[i].sumP = cal[i]
	}
}

func (a *agg) observe(e ringEntry, d int64) {
	a.count += d
	a.loss += float64(d) * float64(e.loss)
	if e.correct() {
		a.correct += d
	}
	c := &a.cal[e.cal]
	c.count += d
	c.sumP += float64(d) * float64(e.prob)
	if e.predicted() {
		a.predPos += d
	}
	if e.label() {
		a.positives += d
		a.pos[e.bin] += d
		c.positives += d
		if e.correct() {
			a.truePos += d
		}
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

// LastLoss returns the log loss of the last event observed (0 before the
// first), as the recent window keeps it: a drift detector reads it
// instead of computing the logarithm again.
func (p *Progressive) LastLoss() float64 {
	i := p.next - 1
	if i < 0 {
		i = len(p.ring) - 1
	}
	return float64(p.ring[i].loss)
}

// Count returns the number of events observed over the whole run
// (including merged ones).
func (p *Progressive) Count() int64 { return p.all.count }

// Window returns the size of the recent window.
func (p *Progressive) Window() int { return p.window }

// Summary returns the measures over the whole run and the recent window.
func (p *Progressive) Summary() Metrics {
	return Metrics{All: measures(&p.all, nil), Recent: measures(&p.recent, &p.merged)}
}

// measures computes the measures of a (plus b if not nil).
func measures(a, b *agg) Measures {
	var sum agg
	sum.add(a)
	if b != nil {
		sum.add(b)
	}
	m := Measures{Count: sum.count, Positives: sum.positives}
	m.confusion(&sum)
	m.calibration(&sum)
	if m.Count == 0 {
		return m
	}
	m.Accuracy = float64(sum.correct) / float64(m.Count)
	m.LogLoss = max(sum.loss, 0) / float64(m.Count)
	m.AUC = sum.auc()
	return m
}

// auc is P(p+ > p-) + P(p+ == p-)/2, with ties within a bin; 0 without
// positives or negatives.
func (a *agg) auc() float64 {
	neg := a.count - a.positives
	if a.positives == 0 || neg == 0 {
		return 0
	}
	var below, conc float64 // negatives in lower bins; concordant pairs
	for i := 0; i < AUCBins; i++ {
		np, nn := a.pos[i], a.neg[i]
		conc += float64(np) * (below + 0.5*float64(nn))
		below += float64(nn)
	}
	return conc / (float64(a.positives) * float64(neg))
}

// confusion fills the counts at the decision threshold and the measures
// made of them.
func (m *Measures) confusion(a *agg) {
	m.TP = a.truePos
	m.FP = a.predPos - a.truePos
	m.FN = a.positives - a.truePos
	m.TN = a.count - a.positives - m.FP
	if a.predPos > 0 {
		m.Precision = float64(m.TP) / float64(a.predPos)
	}
	if a.positives > 0 {
		m.Recall = float64(m.TP) / float64(a.positives)
	}
	if m.Precision+m.Recall > 0 {
		m.F1 = 2 * m.Precision * m.Recall / (m.Precision + m.Recall)
	}
}

func (m *Measures) calibration(a *agg) {
	for i := range m.Calibration {
		c, src := &m.Calibration[i], &a.cal[i]
		c.Lo, c.Hi = float64(i)/CalibrationBins, float64(i+1)/CalibrationBins
		c.Count = src.count
		if src.count > 0 {
			c.MeanPredicted = max(src.sumP, 0) / float64(src.count)
			c.ObservedRate = float64(src.positives) / float64(src.count)
		}
	}
}
