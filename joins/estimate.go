package joins

import "math"

// Acc holds the sums behind one window's estimates (package doc). Accs of
// partitions that split the join by key add up: their samples are
// independent and their matches disjoint.
type Acc struct {
	Start, End int64 // window [Start, End) in ms; both 0 for the whole stream
	// Seen counts each side's tuples of the window that were not late,
	// Sampled those kept by the sample.
	Seen    [2]uint64
	Sampled [2]uint64
	// M counts sampled matches; Sy and Syy sum their values y and y².
	M, Sy, Syy float64
	// Q11, Qyy and Qy1 sum over ordered pairs of sampled matches that share
	// a tuple: 1, y·y' and y.
	Q11, Qyy, Qy1 float64
	// Evicted counts tuples evicted for max_state that could have matched
	// in this window: its estimates are then low.
	Evicted uint64
	// Lost is the samples this window may have lost in crashes (Widen).
	Lost float64
}

// Add sums b into a (partitions of one window).
func (a *Acc) Add(b *Acc) {
	for s := range 2 {
		a.Seen[s] += b.Seen[s]
		a.Sampled[s] += b.Sampled[s]
	}
	a.M += b.M
	a.Sy += b.Sy
	a.Syy += b.Syy
	a.Q11 += b.Q11
	a.Qyy += b.Qyy
	a.Qy1 += b.Qy1
	a.Evicted += b.Evicted
	a.Lost += b.Lost
}

// Interval is an estimate with its confidence interval.
type Interval struct {
	Estimate float64 `json:"estimate"`
	Low      float64 `json:"low"`
	High     float64 `json:"high"`
}

// Estimate is what a window's join looks like so far: COUNT, and SUM and
// AVG of the pair values, each with its interval.
type Estimate struct {
	Start   int64    `json:"window_start"`
	End     int64    `json:"window_end"`
	Seen    uint64   `json:"seen"`
	Sampled uint64   `json:"sampled"`
	Matches uint64   `json:"matches"` // sampled matches found
	Count   Interval `json:"count"`
	Sum     Interval `json:"sum"`
	// Avg is absent while the window has no match.
	Avg        *Interval `json:"avg,omitempty"`
	Sample     float64   `json:"sample"`
	Confidence float64   `json:"confidence"`
	// Exact: no sampling, eviction or loss, so COUNT and SUM are the join's.
	Exact bool `json:"exact"`
	// Complete is false when tuples that could have matched in the window
	// were evicted for max_state: the estimates are then low, and the high
	// ends allow for the matches the evicted tuples would have found.
	Complete bool `json:"complete"`
	// Lost is the samples lost in crashes; Widened the factor the
	// half-widths grew by because of them (AF-Stream: n/(n−λ) samples).
	Lost    float64 `json:"lost_samples,omitempty"`
	Widened float64 `json:"widened,omitempty"`
	// Unbounded: more samples may be lost than the window has; the
	// intervals say nothing then.
	Unbounded bool `json:"unbounded,omitempty"`
}

// Estimate computes the window's estimates for sample probability p at
// confidence (for example 0.95).
func (a *Acc) Estimate(p, confidence float64) Estimate {
	e := Estimate{
		Start: a.Start, End: a.End, Seen: a.Seen[0] + a.Seen[1], Sampled: a.Sampled[0] + a.Sampled[1],
		Matches: uint64(a.M), Sample: p, Confidence: confidence,
		Complete: a.Evicted == 0, Lost: a.Lost,
	}
	e.Exact = p >= 1 && a.Evicted == 0 && a.Lost == 0
	q := p * p
	p4 := q * q
	c := a.M / q
	s := a.Sy / q
	varC := ((1-q)*a.M + (1-p)*a.Q11) / p4
	varS := ((1-q)*a.Syy + (1-p)*a.Qyy) / p4
	cov := ((1-q)*a.Sy + (1-p)*a.Qy1) / p4
	z := Z(confidence)
	// After a crash: half-widths over n−λ samples instead of n, and the
	// matches the lost samples took with them on the high side.
	widen, lostC, lostS := 1.0, 0.0, 0.0
	if n := float64(e.Sampled); a.Lost > 0 {
		if n <= a.Lost {
			e.Unbounded = true
		} else {
			widen = math.Sqrt(n / (n - a.Lost))
			lostC = a.Lost * 2 * c / n
			lostS = a.Lost * 2 * math.Abs(s) / n
		}
		e.Widened = widen
	}
	// Evicted tuples take the matches they would still have found with
	// them: the high side rises by what they would have found at the
	// window's rate of matches per sampled tuple. Like AF-Stream's
	// compensation for lost samples, an estimate, not a guarantee.
	if n := float64(e.Sampled); a.Evicted > 0 && n > 0 {
		lostC += float64(a.Evicted) * 2 * c / n
		lostS += float64(a.Evicted) * 2 * math.Abs(s) / n
	}
	e.Count = interval(c, z*widen*math.Sqrt(max(varC, 0)), lostC)
	// The sampled matches are real: the join has at least as many.
	e.Count.Low = max(e.Count.Low, a.M)
	e.Sum = interval(s, z*widen*math.Sqrt(max(varS, 0)), lostS)
	if a.M > 0 {
		r := s / c
		varA := (varS - 2*r*cov + r*r*varC) / (c * c)
		avg := interval(r, z*widen*math.Sqrt(max(varA, 0)), 0)
		e.Avg = &avg
	}
	return e
}

func interval(est, half, extraHigh float64) Interval {
	return Interval{Estimate: est, Low: est - half, High: est + half + extraHigh}
}

// Windows returns copies of the open windows (ascending; the last is the
// newest) and of the kept closed ones.
func (j *Join) Windows() (open, closed []Acc) {
	for _, a := range j.wins {
		open = append(open, *a)
	}
	for _, a := range j.closed {
		closed = append(closed, *a)
	}
	return open, closed
}
