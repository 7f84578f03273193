package learners

// Term is one feature's part in a prediction: its slot, its value as the
// model sees it (after per-event normalization), the slot's effective
// weight and their product, the feature's contribution to the margin.
type Term struct {
	Slot         int     `json:"slot"`
	Value        float64 `json:"value"`
	Weight       float64 `json:"weight"`
	Contribution float64 `json:"contribution"`
}

// Explanation is a prediction taken apart, as Vowpal Wabbit's --audit:
// Margin is Bias plus the contributions, in order, and P its sigmoid.
type Explanation struct {
	Bias   float64 `json:"bias"`
	Margin float64 `json:"margin"`
	P      float64 `json:"p"`
	// Terms has one entry per feature of the event, in order; a feature
	// the model skips (value 0 after normalization) contributes 0.
	Terms []Term `json:"terms"`
}

// Explain returns the global model's prediction of an event, feature by
// feature. It adds up the margin in the order Predict does, so P equals
// Predict(feats) unless a concurrent merge changed a weight between them.
func (m *Model) Explain(feats []Feature) Explanation {
	k := 1.0
	if m.norm != normNone {
		k = m.eventNorm(feats)
	}
	e := Explanation{Bias: m.Weight(m.bias), Terms: make([]Term, len(feats))}
	e.Margin = e.Bias
	for i, f := range feats {
		x := f.Value
		if m.norm != normNone {
			x = m.transform(x) * k
		}
		t := Term{Slot: int(f.Hash & m.mask), Value: x}
		if !skipValue(x) {
			t.Weight = m.Weight(t.Slot)
			t.Contribution = t.Weight * x
			e.Margin += t.Contribution
		}
		e.Terms[i] = t
	}
	e.P = sigmoid(e.Margin)
	return e
}
