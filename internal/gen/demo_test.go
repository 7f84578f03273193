package gen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"
)

// demoLine is what a test reads back of a click or a purchase.
type demoLine struct {
	Click  *int   `json:"click"`
	Key    string `json:"key"`
	TS     int64  `json:"ts"`
	Amount int64  `json:"amount"`
}

func readDemoLines(t *testing.T, b []byte) []demoLine {
	t.Helper()
	var out []demoLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l demoLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Click == nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// Every purchase names a click of the same user 0 to 2 s before it, no
// click is bought twice, and the totals add up what was generated.
func TestDemoPurchasesFollowTheirClick(t *testing.T) {
	d := NewDemo(Config{Seed: 4})
	var clicks, buys []byte
	for i := range 30000 {
		_, clicks, buys = d.Next(StartTS+int64(i), clicks, buys)
	}
	byID := map[int]demoLine{}
	for i, c := range readDemoLines(t, clicks) {
		if *c.Click != i {
			t.Fatalf("click %d has id %d", i, *c.Click)
		}
		byID[i] = c
	}
	var amount int64
	bought := map[int]bool{}
	ps := readDemoLines(t, buys)
	for _, p := range ps {
		c, ok := byID[*p.Click]
		if !ok || bought[*p.Click] || c.Key != p.Key || p.TS < c.TS || p.TS-c.TS >= PurchaseDelay {
			t.Fatalf("purchase %+v of click %+v (bought before: %v)", p, c, bought[*p.Click])
		}
		bought[*p.Click] = true
		amount += p.Amount
	}
	tot := d.Totals()
	if tot.Events != 30000 || tot.Purchases != len(ps) || tot.Amount != amount || len(ps) < 30000/10 {
		t.Fatalf("totals %+v; %d purchases worth %d", tot, len(ps), amount)
	}
}

// A demo restored from its saved state goes on exactly as if it had not
// stopped: after the drift, events come from the drifted model.
func TestDemoRestoreKeepsThePhase(t *testing.T) {
	cfg := Config{Seed: 9, DriftAfter: 1000}
	for _, stopAt := range []int{400, 1500} {
		a := NewDemo(cfg)
		for i := range stopAt {
			a.Next(int64(i), nil, nil)
		}
		saved, err := json.Marshal(a.State())
		if err != nil {
			t.Fatal(err)
		}
		var st DemoState
		if err := json.Unmarshal(saved, &st); err != nil {
			t.Fatal(err)
		}
		b, err := RestoreDemo(cfg, st)
		if err != nil {
			t.Fatal(err)
		}
		if b.Drifted() != (stopAt >= cfg.DriftAfter) || b.Drifted() != st.Drifted || b.Totals() != a.Totals() {
			t.Fatalf("stopped at %d: restored drifted=%v (state says %v), totals %+v, want %+v",
				stopAt, b.Drifted(), st.Drifted, b.Totals(), a.Totals())
		}
		for i := range 1000 {
			ea, ca, pa := a.Next(int64(i), nil, nil)
			eb, cb, pb := b.Next(int64(i), nil, nil)
			if !bytes.Equal(ca, cb) || !bytes.Equal(pa, pb) || ea.TrueP != eb.TrueP {
				t.Fatalf("stopped at %d: event %d after the restart differs:\n%s%s\n%s%s", stopAt, i, ca, pa, cb, pb)
			}
		}
		if fresh := NewDemo(cfg); stopAt >= cfg.DriftAfter && fresh.Drifted() {
			t.Fatal("a fresh demo starts drifted")
		}
	}
}

// A state of another seed or drift point, or a damaged one, is refused.
func TestDemoRestoreRefusesOtherStates(t *testing.T) {
	cfg := Config{Seed: 9, DriftAfter: 1000}
	good := NewDemo(cfg).State()
	bad := map[string]func(*DemoState){
		"seed":    func(s *DemoState) { s.Seed++ },
		"drift":   func(s *DemoState) { s.DriftAfter = 0 },
		"rng":     func(s *DemoState) { s.EventsRNG = s.EventsRNG[:3] },
		"buy rng": func(s *DemoState) { s.BuyRNG = nil },
		"totals":  func(s *DemoState) { s.Totals.Purchases = 5 },
	}
	for name, spoil := range bad {
		st := good
		spoil(&st)
		if _, err := RestoreDemo(cfg, st); err == nil {
			t.Errorf("%s: restored", name)
		}
	}
}
