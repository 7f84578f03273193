package ft

import "testing"

func TestControllerThresholds(t *testing.T) {
	b := Bounds{Mode: ModeApprox, MaxDivergence: 8, MaxPending: 1000, MaxUnacked: 400}
	c := NewController(b, 2, 0)
	if got := c.Thresholds(); got != (Thresholds{Theta: 2, L: 250, Gamma: 100}) {
		t.Fatalf("start: %+v", got)
	}
	c.Recovered()
	if got := c.Thresholds(); got != (Thresholds{Theta: 1, L: 125, Gamma: 50}) || c.Failures() != 1 {
		t.Fatalf("after one recovery: %+v", got)
	}
	// A restart with the stored failure count never loosens them.
	if got := NewController(b, 2, 1).Thresholds(); got != c.Thresholds() {
		t.Fatalf("restart: %+v", got)
	}
	for range 20 {
		c.Recovered()
	}
	if got := c.Thresholds(); got.L != 0 || got.Gamma != 0 || got.Theta <= 0 {
		t.Fatalf("after many recoveries: %+v", got)
	}
	c.ResetWindow()
	if got := c.Thresholds(); got != (Thresholds{Theta: 2, L: 250, Gamma: 100}) || c.Failures() != 0 {
		t.Fatalf("after a window end: %+v", got)
	}
}

// The errors of k failures, each within the thresholds in force, stay
// within the promise for any k (the geometric series of the paper).
func TestFailuresStayWithinPromise(t *testing.T) {
	b := Bounds{Mode: ModeApprox, MaxDivergence: 1, MaxPending: 1000, MaxUnacked: 100}
	const n, alpha = 4, 0.01
	c := NewController(b, n, 0)
	var state float64
	var events int
	for range 30 {
		th := c.Thresholds()
		// Worst case per failure: every copy at its thresholds.
		state += n * (th.Theta + float64(th.L)*alpha)
		events += n * (th.L + th.Gamma)
		c.Recovered()
	}
	p := b.Promise(alpha, 1)
	if state > p.State || int64(events) > p.Events {
		t.Fatalf("30 failures: state %v, events %d; promise %+v", state, events, p)
	}
}

func TestBoundsValidate(t *testing.T) {
	good := Bounds{Mode: ModeApprox, MaxDivergence: 1, MaxPending: 1, MaxUnacked: 1}
	if f, err := good.Validate(); err != nil {
		t.Fatal(f, err)
	}
	for _, c := range []struct {
		b     Bounds
		field string
	}{
		{Bounds{Mode: "fast", MaxDivergence: 1, MaxPending: 1, MaxUnacked: 1}, "mode"},
		{Bounds{Mode: ModeExact, MaxDivergence: 0, MaxPending: 1, MaxUnacked: 1}, "max_divergence"},
		{Bounds{Mode: ModeNone, MaxDivergence: 1, MaxPending: 0, MaxUnacked: 1}, "max_pending"},
		{Bounds{Mode: ModeNone, MaxDivergence: 1, MaxPending: 1, MaxUnacked: -1}, "max_unacked"},
	} {
		if f, err := c.b.Validate(); err == nil || f != c.field {
			t.Errorf("%+v: field %q err %v", c.b, f, err)
		}
	}
}
