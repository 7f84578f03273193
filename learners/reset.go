package learners

import (
	"math"
	"sync/atomic"
)

// Responses to a drift (the on_drift param of a logreg job): forget the
// adaptive optimizers' per-weight rates, or the whole model. Both run
// where merges run (serialised with Sync and with each other); predictions
// may read the model meanwhile. With a tracker, every slot changed is
// recorded in it (a reset moves the weights, and so the state divergence;
// a rate reset changes the slots' words, which a delta backup must hold).

// ResetRates gives every weight the step size of a fresh model again,
// keeping the weights: FTRL's and AdaGrad's sums of squared gradients go
// to 0 (FTRL's z is rescaled so that its weight stays), and SGD's
// 1/sqrt(t) schedule starts over. It returns the slots changed.
func (m *Model) ResetRates(t *Tracker) int {
	if m.opt == optSGD {
		m.rateFrom.Store(m.updates.Load())
		return 0
	}
	changed := 0
	for slot := range m.nslots {
		base := slot * stride
		b := m.load(base + offB)
		if b == 0 {
			continue
		}
		if m.opt == optFTRL {
			// w ∝ (z - sign(z)·l1) / ((β+√n)/α + l2): with n = 0 the same w
			// needs z - sign(z)·l1 scaled by r.
			r := (m.beta/m.alpha + m.l2) / ((m.beta+math.Sqrt(b))/m.alpha + m.l2)
			m.rescaleA(base+offA, r)
		}
		atomic.StoreUint64(&m.state[base+offB], 0)
		changed++
		if t != nil {
			t.changed(slot, m.Weight(slot))
		}
	}
	return changed
}

// Reset zeroes every weight and optimizer accumulator, keeping the
// features' adaptive scales (what a value's range is has not drifted with
// the labels) and the version and update counts. It returns the slots
// changed.
func (m *Model) Reset(t *Tracker) int {
	m.rateFrom.Store(m.updates.Load())
	changed := 0
	for slot := range m.nslots {
		base := slot * stride
		if m.load(base+offA) == 0 && m.load(base+offB) == 0 {
			continue
		}
		atomic.StoreUint64(&m.state[base+offA], 0)
		atomic.StoreUint64(&m.state[base+offB], 0)
		changed++
		if t != nil {
			t.changed(slot, 0)
		}
	}
	return changed
}
