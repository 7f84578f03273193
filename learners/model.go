package learners

import (
	"math"
	"slices"
	"sync/atomic"
)

// Layout of the global state: stride words per slot, interleaved so that one
// feature touches one cache line (two slots per 64-byte line).
const (
	stride = 4
	offA   = 0 // FTRL z; AdaGrad and SGD: w (in normalized units)
	offB   = 1 // FTRL n; AdaGrad: sum of squared gradients; SGD: unused
	offInv = 2 // adaptive only: 1/s, s = max |x| seen for the feature; 0 = never seen
	// (the inverse is kept so that the hot path multiplies instead of dividing)
	offTracked = 3 // with a Tracker (ftstate.go): the effective weight at the last backup and now, two float32; else unused
)

type optKind uint8

const (
	optFTRL optKind = iota + 1
	optAdaGrad
	optSGD
)

// normKind is a normalization; its value is the code in snapshots
// (persist.go), so the values are fixed.
type normKind uint8

const (
	normNone    normKind = 0
	normL2      normKind = 1
	normLog1pL2 normKind = 2
	normSqrt    normKind = 3
)

// normKinds maps Config.Normalize names to kinds.
var normKinds = map[string]normKind{NormalizeNone: normNone, NormalizeL2: normL2, NormalizeLog1pL2: normLog1pL2, NormalizeSqrt: normSqrt}

// perEvent reports whether the normalization scales each event by a
// factor computed from all its values (eventNorm), rather than value by
// value.
func (k normKind) perEvent() bool { return k == normL2 || k == normLog1pL2 }

// maxMargin bounds the margin given to the sigmoid, so exp never overflows
// and probabilities stay in (0, 1).
const maxMargin = 35

// Model is the versioned global logistic regression model of a job. It is
// safe for concurrent use: Predict, Weight, Snapshot and WriteTo may run
// while Learners sync into it, and all state is accessed with sync/atomic.
// A Model is trained through Learners (see NewLearner).
type Model struct {
	cfg  Config
	opt  optKind
	norm normKind
	// normDefault: the Config left Normalize empty, so a snapshot read
	// sets the normalization (ReadFrom).
	normDefault bool
	adaptive    bool
	alpha       float64
	invAlpha    float64
	beta        float64
	l1, l2      float64
	clip        float64

	mask   uint64 // (1 << HashBits) - 1
	bias   int    // slot of the intercept: 1 << HashBits
	nslots int    // (1 << HashBits) + 1

	// state holds stride float64 bits per slot; access only with sync/atomic.
	state []uint64

	version atomic.Uint64 // syncs applied
	updates atomic.Uint64 // labelled events merged
	skipped atomic.Uint64 // updates refused for making the state non-finite
	// rateFrom is the update count SGD's 1/sqrt(t) schedule counts from
	// (ResetRates); not persisted.
	rateFrom atomic.Uint64
}

// NewModel validates cfg, fills its defaults and returns an empty model.
func NewModel(cfg Config) (*Model, error) {
	m, err := newModelShell(cfg)
	if err != nil {
		return nil, err
	}
	m.state = make([]uint64, m.nslots*stride)
	adviseHuge(m.state)
	return m, nil
}

// newModelShell is NewModel without the state: the configuration that
// turns a slot's words into a weight.
func newModelShell(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	normDefault := cfg.Normalize == ""
	cfg.EnsureDefaults()
	a := *cfg.Adaptive // copy so the caller's pointer is not shared
	cfg.Adaptive = &a
	m := &Model{
		cfg:         cfg,
		norm:        normKinds[cfg.Normalize],
		normDefault: normDefault,
		adaptive:    a,
		alpha:       cfg.Alpha,
		invAlpha:    1 / cfg.Alpha,
		beta:        cfg.Beta,
		l1:          cfg.L1,
		l2:          cfg.L2,
		clip:        cfg.Clip,
		mask:        1<<uint(cfg.HashBits) - 1,
		bias:        1 << uint(cfg.HashBits),
		nslots:      1<<uint(cfg.HashBits) + 1,
	}
	switch cfg.Optimizer {
	case OptimizerFTRL:
		m.opt = optFTRL
	case OptimizerAdaGrad:
		m.opt = optAdaGrad
	case OptimizerSGD:
		m.opt = optSGD
	}
	return m, nil
}

// Config returns the model's configuration, with defaults filled.
func (m *Model) Config() Config {
	c := m.cfg
	a := *c.Adaptive
	c.Adaptive = &a
	return c
}

// Version returns the number of syncs applied to the model.
func (m *Model) Version() uint64 { return m.version.Load() }

// Updates returns the number of labelled events merged into the model.
func (m *Model) Updates() uint64 { return m.updates.Load() }

// Skipped returns the number of updates the model refused because they
// would have made a weight or an optimizer accumulator infinite or NaN:
// events learned from (Learner.Learn) and merges of a slot (Sync) that
// were dropped instead. Each one is an event the model did not learn.
func (m *Model) Skipped() uint64 { return m.skipped.Load() }

// Slot returns the weight slot of a feature hash.
func (m *Model) Slot(hash uint64) int { return int(hash & m.mask) }

// BiasSlot returns the slot of the intercept, 1<<HashBits (past the
// feature slots, so it never collides with a feature).
func (m *Model) BiasSlot() int { return m.bias }

// Slots returns the number of slots including the intercept:
// (1<<HashBits)+1.
func (m *Model) Slots() int { return m.nslots }

func (m *Model) load(i int) float64 { return math.Float64frombits(atomic.LoadUint64(&m.state[i])) }

// addFloat adds d to the float64 stored at state[i], atomically. A sum
// that is not finite is not stored, and counted in Skipped.
func (m *Model) addFloat(i int, d float64) {
	m.addFloatNew(i, d)
}

// addFloats adds da to word A and db to word B of the slot at base, each
// atomically (addAB's portable form).
func (m *Model) addFloats(base int, da, db float64) {
	if da != 0 {
		m.addFloat(base+offA, da)
	}
	if db != 0 {
		m.addFloat(base+offB, db)
	}
}

// growScale raises the scale of slot to x (> 0) if it is smaller, and
// rescales the slot's global state so that its effective weight is
// unchanged. It returns the factor r = new/old by which the caller must
// rescale its local delta of word A, or 1 if the scale did not grow (or
// the slot was never touched). Other learners' unsynced deltas of the slot
// stay in the old scale until they sync (the documented approximation).
func (m *Model) growScale(slot int, x float64) float64 {
	base := slot * stride
	p := &m.state[base+offInv]
	inv := 1 / x
	nb := math.Float64bits(inv)
	for {
		ob := atomic.LoadUint64(p)
		// Both are positive floats, whose bit patterns order like values.
		if ob != 0 && nb >= ob {
			return 1
		}
		if atomic.CompareAndSwapUint64(p, ob, nb) {
			if ob == 0 {
				return 1
			}
			r := math.Float64frombits(ob) / inv // s'/s
			m.rescaleA(base+offA, r)
			return r
		}
	}
}

// rescaleA multiplies word A by r atomically. For FTRL with L1 it applies
// z' = r*z - (r-1)*sign(z)*L1, which keeps w/s exact (w = 0 stays 0).
func (m *Model) rescaleA(i int, r float64) {
	p := &m.state[i]
	for {
		oldBits := atomic.LoadUint64(p)
		z := math.Float64frombits(oldBits)
		nz := r * z
		if m.opt == optFTRL && m.l1 > 0 {
			nz -= (r - 1) * math.Copysign(m.l1, z)
		}
		if atomic.CompareAndSwapUint64(p, oldBits, math.Float64bits(nz)) {
			return
		}
	}
}

// rawWeight returns the weight in normalized units for state (a, b).
func (m *Model) rawWeight(a, b float64) float64 {
	if m.opt != optFTRL {
		return a
	}
	if m.l1 == 0 {
		return -a / ((m.beta+math.Sqrt(b))/m.alpha + m.l2)
	}
	if math.Abs(a) <= m.l1 {
		return 0
	}
	return -(a - math.Copysign(m.l1, a)) / ((m.beta+math.Sqrt(b))/m.alpha + m.l2)
}

// Weight returns the effective weight of a slot (the coefficient applied to
// the feature's raw, normalized-per-event value), or 0 for an out-of-range
// slot.
func (m *Model) Weight(slot int) float64 {
	if slot < 0 || slot >= m.nslots {
		return 0
	}
	base := slot * stride
	w := m.rawWeight(m.load(base+offA), m.load(base+offB))
	if m.adaptive {
		w *= m.load(base + offInv)
	}
	return w
}

// eventNorm returns the factor by which per-event normalization multiplies
// the (transformed) values: 1 without one.
func (m *Model) eventNorm(feats []Feature) float64 {
	if !m.norm.perEvent() {
		return 1
	}
	var ss float64
	for _, f := range feats {
		v := m.transform(f.Value)
		ss += v * v
	}
	if ss == 0 {
		return 1
	}
	return 1 / math.Sqrt(ss)
}

// transform is the value-by-value part of the normalization.
func (m *Model) transform(v float64) float64 {
	switch m.norm {
	case normSqrt:
		return sqrtTail(v)
	case normLog1pL2:
		return math.Copysign(math.Log1p(math.Abs(v)), v)
	}
	return v
}

// sqrtTail is the sqrt normalization of one value: sign(v)*sqrt(|v|) if
// |v| > 1, else v. It is continuous and monotone, keeps 0, ±1, NaN and
// the infinities, and costs a comparison for values in [-1, 1] (one-hot
// and boolean features) and a square root for the others.
func sqrtTail(v float64) float64 {
	if v > 1 {
		return math.Sqrt(v)
	}
	if v < -1 {
		return -math.Sqrt(-v)
	}
	return v
}

// Predict returns the probability of a positive label with the global
// model. It does not allocate and is safe for concurrent use.
func (m *Model) Predict(feats []Feature) float64 {
	return m.predict(feats, nil)
}

// predict computes the probability with the global state plus the optional
// local delta.
func (m *Model) predict(feats []Feature, local *deltaMap) float64 {
	k := 1.0
	if m.norm != normNone {
		k = m.eventNorm(feats)
	}
	margin := m.slotMargin(m.bias, 1, local)
	if local == nil || len(local.used) == 0 {
		if m.opt != optFTRL {
			return sigmoid(m.marginW(feats, k, margin))
		}
		if m.l1 == 0 {
			return sigmoid(m.marginFTRL(feats, k, margin))
		}
	}
	for _, f := range feats {
		x := f.Value
		if m.norm != normNone {
			x = m.transform(x) * k
		}
		if x == 0 || x != x {
			continue
		}
		margin += m.slotMargin(int(f.Hash&m.mask), x, local)
	}
	return sigmoid(margin)
}

// marginFTRL adds to margin the terms of the features of an event for the
// global FTRL model without L1: the loop of predict with rawWeight and
// slotMargin inlined and their branches hoisted, and the same arithmetic in
// the same order, so the same result bit for bit.
func (m *Model) marginFTRL(feats []Feature, k, margin float64) float64 {
	state, mask, norm, adaptive := m.state, m.mask, m.norm, m.adaptive
	beta, alpha, l2 := m.beta, m.alpha, m.l2
	for _, f := range feats {
		x := f.Value
		if norm != normNone {
			x = m.transform(x) * k
		}
		if skipValue(x) {
			continue
		}
		slot := f.Hash & mask
		st := state[slot*stride : slot*stride+stride : slot*stride+stride]
		a := math.Float64frombits(atomic.LoadUint64(&st[offA]))
		b := math.Float64frombits(atomic.LoadUint64(&st[offB]))
		w := -a / ((beta+math.Sqrt(b))/alpha + l2)
		if adaptive {
			w *= math.Float64frombits(atomic.LoadUint64(&st[offInv]))
		}
		margin += w * x
	}
	return margin
}

// marginW is marginFTRL for the optimizers that store w (AdaGrad, SGD).
func (m *Model) marginW(feats []Feature, k, margin float64) float64 {
	state, mask, norm, adaptive := m.state, m.mask, m.norm, m.adaptive
	for _, f := range feats {
		x := f.Value
		if norm != normNone {
			x = m.transform(x) * k
		}
		if skipValue(x) {
			continue
		}
		slot := f.Hash & mask
		st := state[slot*stride : slot*stride+stride : slot*stride+stride]
		w := math.Float64frombits(atomic.LoadUint64(&st[offA]))
		if adaptive {
			w *= math.Float64frombits(atomic.LoadUint64(&st[offInv]))
		}
		margin += w * x
	}
	return margin
}

func (m *Model) slotMargin(slot int, x float64, local *deltaMap) float64 {
	st := m.state[slot*stride : slot*stride+stride]
	a := math.Float64frombits(atomic.LoadUint64(&st[offA]))
	b := math.Float64frombits(atomic.LoadUint64(&st[offB]))
	if local != nil && len(local.used) > 0 {
		da, db := local.get(slot)
		a += da
		b += db
	}
	w := m.rawWeight(a, b)
	if m.adaptive {
		w *= math.Float64frombits(atomic.LoadUint64(&st[offInv]))
	}
	return w * x
}

func sigmoid(margin float64) float64 {
	if margin > maxMargin {
		margin = maxMargin
	} else if margin < -maxMargin {
		margin = -maxMargin
	} else if margin != margin {
		margin = 0
	}
	return 1 / (1 + math.Exp(-margin))
}

// Snapshot is a versioned view of the global model for the API.
type Snapshot struct {
	Version uint64 `json:"version"`
	Updates uint64 `json:"updates"`
	// Skipped counts updates refused for making the state non-finite
	// (Model.Skipped).
	Skipped  uint64        `json:"skipped_updates"`
	HashBits int           `json:"hash_bits"`
	NonZero  int           `json:"nonzero_weights"`
	Weights  []WeightEntry `json:"weights,omitempty"`
}

// WeightEntry is one non-zero effective weight. The intercept is reported
// under Slot = 1<<HashBits (see Model.BiasSlot).
type WeightEntry struct {
	Slot   int     `json:"slot"`
	Weight float64 `json:"weight"`
}

// Snapshot returns the version, the update count and the number of non-zero
// weights and, if withWeights, the non-zero weights with the largest
// absolute value first (at most limit of them; limit <= 0 means all). It
// scans every slot (O(2^HashBits)). Under concurrent syncs it is not a
// consistent cut: each slot is read atomically, and Version is read first.
func (m *Model) Snapshot(withWeights bool, limit int) Snapshot {
	s := Snapshot{
		Version:  m.Version(),
		Updates:  m.Updates(),
		Skipped:  m.Skipped(),
		HashBits: m.cfg.HashBits,
	}
	for slot := 0; slot < m.nslots; slot++ {
		w := m.Weight(slot)
		if w == 0 {
			continue
		}
		s.NonZero++
		if withWeights {
			s.Weights = append(s.Weights, WeightEntry{Slot: slot, Weight: w})
		}
	}
	if withWeights {
		sortWeights(s.Weights)
		if limit > 0 && len(s.Weights) > limit {
			s.Weights = slices.Clip(s.Weights[:limit])
		}
	}
	return s
}
