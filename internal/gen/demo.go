package gen

import (
	"fmt"
	"math/rand/v2"
	"strconv"
)

// Demo is the event source of `mlstream demo`: the labelled events of a
// Generator ("clicks"), each with a click id (its number in the stream),
// and for a third of the positive ones a purchase that names its click,
// 0 to 2 s of event time after it, with an amount of 5 to 99. Joined on
// the click id within PurchaseDelay, every purchase matches exactly its
// click, once.
//
// Its position (State) can be saved and restored, so that a restarted
// demo goes on where it stopped: past the drift if it was, like the model
// it feeds, which is restored too.
type Demo struct {
	g   *Generator
	src *rand.PCG // r's source, whose state State saves
	r   *rand.Rand
	tot DemoTotals
}

// PurchaseDelay bounds how long after its click a purchase comes (in
// event time): the delay is uniform in [0, PurchaseDelay).
const PurchaseDelay = 2000 // ms

// DemoTotals counts what a Demo generated.
type DemoTotals struct {
	Events    int   `json:"events"`
	Purchases int   `json:"purchases"`
	Amount    int64 `json:"amount"` // sum of the purchases' amounts
}

// DemoState is a Demo's position: its config, totals and the states of
// its random sources.
type DemoState struct {
	Seed       int64      `json:"seed"`
	DriftAfter int        `json:"drift_after"`
	Totals     DemoTotals `json:"totals"`
	Drifted    bool       `json:"drifted"` // informative: the next event is of the drifted model
	EventsRNG  []byte     `json:"events_rng"`
	BuyRNG     []byte     `json:"purchases_rng"`
}

// NewDemo returns a demo source for cfg, at its start.
func NewDemo(cfg Config) *Demo {
	src := rand.NewPCG(uint64(cfg.Seed), 99)
	return &Demo{g: New(cfg), src: src, r: rand.New(src)}
}

// RestoreDemo returns a demo source for cfg at the position st. It fails
// when st was saved for another seed or drift point, or is damaged.
func RestoreDemo(cfg Config, st DemoState) (*Demo, error) {
	if st.Seed != cfg.Seed || st.DriftAfter != cfg.DriftAfter {
		return nil, fmt.Errorf("saved for seed %d and drift after %d events, not seed %d and drift after %d",
			st.Seed, st.DriftAfter, cfg.Seed, cfg.DriftAfter)
	}
	t := st.Totals
	if t.Events < 0 || t.Purchases < 0 || t.Purchases > t.Events || t.Amount < 0 {
		return nil, fmt.Errorf("impossible totals %+v", t)
	}
	d := NewDemo(cfg)
	if err := d.g.src.UnmarshalBinary(st.EventsRNG); err != nil {
		return nil, fmt.Errorf("events_rng: %w", err)
	}
	if err := d.src.UnmarshalBinary(st.BuyRNG); err != nil {
		return nil, fmt.Errorf("purchases_rng: %w", err)
	}
	d.g.n, d.tot = t.Events, t
	return d, nil
}

// State returns the demo's position, for RestoreDemo.
func (d *Demo) State() DemoState {
	ev, err := d.g.src.MarshalBinary()
	if err != nil {
		panic(err) // a PCG always marshals
	}
	buy, err := d.src.MarshalBinary()
	if err != nil {
		panic(err)
	}
	return DemoState{Seed: d.g.cfg.Seed, DriftAfter: d.g.cfg.DriftAfter, Totals: d.tot, Drifted: d.g.Drifted(),
		EventsRNG: ev, BuyRNG: buy}
}

// Totals returns what the demo generated so far.
func (d *Demo) Totals() DemoTotals { return d.tot }

// Drifted reports whether the next event comes from the drifted model.
func (d *Demo) Drifted() bool { return d.g.Drifted() }

// Next generates one click at event time ts and appends it to clicks as
// an NDJSON line ({"click":n,"key":…,"ts":ts,"label":…,"features":{…}}),
// and, when the click leads to a purchase, appends that to purchases
// ({"click":n,"key":…,"ts":…,"amount":a}). It returns the event and both
// buffers.
func (d *Demo) Next(ts int64, clicks, purchases []byte) (Event, []byte, []byte) {
	id := d.g.Count()
	ev := d.g.Next()
	ev.TS = ts
	clicks = append(ev.appendJSON(clicks, id), '\n')
	d.tot.Events++
	if ev.Label && d.r.IntN(3) == 0 {
		amount := 5 + d.r.IntN(95)
		purchases = append(purchases, `{"click":`...)
		purchases = strconv.AppendInt(purchases, int64(id), 10)
		purchases = append(purchases, `,"key":`...)
		purchases = appendString(purchases, ev.Key)
		purchases = append(purchases, `,"ts":`...)
		purchases = strconv.AppendInt(purchases, ts+d.r.Int64N(PurchaseDelay), 10)
		purchases = append(purchases, `,"amount":`...)
		purchases = strconv.AppendInt(purchases, int64(amount), 10)
		purchases = append(purchases, "}\n"...)
		d.tot.Purchases++
		d.tot.Amount += int64(amount)
	}
	return ev, clicks, purchases
}
