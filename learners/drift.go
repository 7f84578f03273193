package learners

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Page-Hinkley defaults. River's min_instances and delta; its threshold 50
// and alpha 0.9999 signalled drifts in stationary generated streams (the
// per-event log loss varies a lot), so the threshold is doubled and past
// terms fade ten times faster: on the generator (internal/gen) a change of
// the true model is then found within about 300 events, and 40,000
// stationary events raise none.
const (
	DefaultDriftMinInstances = 30
	DefaultDriftDelta        = 0.005
	DefaultDriftThreshold    = 100
	DefaultDriftAlpha        = 1 - 0.001
)

// DriftLossCap caps the log loss fed to a drift detector: one confident
// mistake (a loss up to about 34.5) would otherwise weigh as much as
// hundreds of ordinary ones, and two of them would signal a drift.
const DriftLossCap = 5

// PageHinkley detects an increase of the mean of a stream of values (the
// per-event log loss): the Page-Hinkley test as River implements it. It
// accumulates each value's excess over the running mean (minus Delta, the
// tolerated change), fading past terms by Alpha, and signals a drift when
// the sum rises more than Threshold above its minimum, after at least
// MinInstances values; it then starts over. A PageHinkley is a plain value
// with no clock: O(1) per value, no allocation, not safe for concurrent
// use.
type PageHinkley struct {
	MinInstances int64
	Delta        float64
	Threshold    float64
	Alpha        float64

	n              int64 // values since the last drift
	mean, sum, min float64
}

// NewPageHinkley returns a detector with the default parameters.
func NewPageHinkley() *PageHinkley {
	return &PageHinkley{MinInstances: DefaultDriftMinInstances, Delta: DefaultDriftDelta,
		Threshold: DefaultDriftThreshold, Alpha: DefaultDriftAlpha}
}

// Update adds one value and reports whether it completes a drift. A NaN
// value is ignored.
func (d *PageHinkley) Update(x float64) bool {
	if x != x {
		return false
	}
	d.n++
	d.mean += (x - d.mean) / float64(d.n)
	d.sum = d.Alpha*d.sum + (x - d.mean - d.Delta)
	d.min = min(d.min, d.sum)
	if d.n < d.MinInstances || d.sum-d.min <= d.Threshold {
		return false
	}
	d.Reset()
	return true
}

// UpdatePrediction adds the log loss of predicting prob for label, capped
// at DriftLossCap, and reports whether it completes a drift.
func (d *PageHinkley) UpdatePrediction(prob float64, label bool) bool {
	if prob != prob {
		prob = 0.5
	}
	return d.UpdateLoss(logLoss(prob, label))
}

// UpdateLoss adds a log loss, capped at DriftLossCap, and reports whether
// it completes a drift.
func (d *PageHinkley) UpdateLoss(loss float64) bool {
	return d.Update(min(loss, DriftLossCap))
}

// Reset forgets every value: the detector starts over, as after a drift
// (the parameters stay).
func (d *PageHinkley) Reset() {
	d.n, d.mean, d.sum, d.min = 0, 0, 0, 0
}

// pageHinkleyBytes is the size of a detector's state in a backup.
const pageHinkleyBytes = 32

// MarshalBinary encodes what the detector has seen since its last drift
// (not its parameters, which the job's spec sets), for backups.
func (d *PageHinkley) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, pageHinkleyBytes)
	b = binary.LittleEndian.AppendUint64(b, uint64(d.n))
	for _, v := range []float64{d.mean, d.sum, d.min} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b, nil
}

// UnmarshalBinary restores what MarshalBinary wrote.
func (d *PageHinkley) UnmarshalBinary(data []byte) error {
	if len(data) != pageHinkleyBytes {
		return fmt.Errorf("learners: drift detector state of %d bytes, want %d", len(data), pageHinkleyBytes)
	}
	n := int64(binary.LittleEndian.Uint64(data))
	var v [3]float64
	for i := range v {
		v[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[8+8*i:]))
		if !finite(v[i]) {
			return fmt.Errorf("learners: drift detector state holds %v", v[i])
		}
	}
	if n < 0 {
		return fmt.Errorf("learners: drift detector state counts %d values", n)
	}
	d.n, d.mean, d.sum, d.min = n, v[0], v[1], v[2]
	return nil
}
