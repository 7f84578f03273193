package runtime

import (
	"testing"
	"time"
)

// The watermark is the least of the partitions' largest event times less
// the lateness, none while a partition has seen nothing, never goes back,
// and leaves a partition out after the idle timeout by its clock, until
// that partition's next events.
func TestWatermark(t *testing.T) {
	now := time.Unix(100, 0)
	w := NewWatermark(50*time.Millisecond, 10*time.Second, func() time.Time { return now })
	a, b := w.Partition(), w.Partition()
	expect := func(what string, wantWM int64, wantOK bool) {
		t.Helper()
		if wm, ok := w.Advance(); wm != wantWM || ok != wantOK {
			t.Fatalf("%s: watermark %d %t, want %d %t", what, wm, ok, wantWM, wantOK)
		}
	}
	a.Observe(1000, true, 1)
	expect("b has seen nothing", 0, false)
	b.Observe(700, true, 1)
	expect("least of 1000 and 700, less 50", 650, true)
	b.Observe(600, true, 2) // an older event: b's largest stays 700
	a.Observe(2000, true, 2)
	expect("b still at 700", 650, true)
	now = now.Add(10 * time.Second)
	a.Observe(2100, true, 3)
	expect("b idle", 2050, true)
	if idle := w.Idle(); len(idle) != 1 || idle[0] != 1 {
		t.Fatalf("idle %v, want [1]", idle)
	}
	b.Observe(900, true, 3)
	expect("b back, behind: the watermark stays", 2050, true)
	if idle := w.Idle(); len(idle) != 0 {
		t.Fatalf("idle %v after b's events", idle)
	}
	now = now.Add(20 * time.Second)
	expect("both idle: the watermark stays", 2050, true)
	if wm, ok := w.Current(); wm != 2050 || !ok {
		t.Fatalf("current %d %t", wm, ok)
	}
}
