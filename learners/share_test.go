package learners

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"
)

func snapshotBytes(t testing.TB, m *Model) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := m.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A delta adds exactly what Sync adds, whatever the optimizer: a plain
// learner that syncs and a shared one whose deltas are applied leave
// equal models, bit for bit, and equal divergences. (Without adaptive
// scales the two learn alike: a shared learner differs only in how it
// grows scales.)
func TestApplyDeltaAddsWhatSyncAdds(t *testing.T) {
	feats, labels := toyEvents(3000)
	for _, opt := range []string{"ftrl", "adagrad", "sgd"} {
		t.Run(opt, func(t *testing.T) {
			noAdapt := false
			cfg := Config{HashBits: 12, Optimizer: opt, Adaptive: &noAdapt, L1: 0.1}
			plain, shared := mustModel(t, cfg), mustModel(t, cfg)
			tp, ts := NewTracker(plain), NewTracker(shared)
			lp, ls := plain.NewLearner(), shared.NewLearner()
			ls.SetShared()
			for i := range feats {
				pp, ps := lp.Learn(feats[i], labels[i]), ls.Learn(feats[i], labels[i])
				if pp != ps {
					t.Fatalf("event %d: predictions %v and %v", i, pp, ps)
				}
				if lp.Pending() < 100 {
					continue
				}
				v := lp.SyncTracked(tp)
				d, n := ls.AppendDelta(nil)
				if err := shared.ApplyDelta(d, uint64(n), v, ts); err != nil {
					t.Fatal(err)
				}
				ls.ClearInFlight()
			}
			if !bytes.Equal(snapshotBytes(t, plain), snapshotBytes(t, shared)) {
				t.Fatal("the models differ")
			}
			if dp, ds := tp.Divergence(), ts.Divergence(); dp == 0 || math.Abs(dp-ds) > 1e-9*dp || tp.Dirty() != ts.Dirty() {
				t.Fatalf("divergence %v (%d dirty) after syncs, %v (%d) after deltas", dp, tp.Dirty(), ds, ts.Dirty())
			}
		})
	}
}

func mustModel(t testing.TB, cfg Config) *Model {
	t.Helper()
	m, err := NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A shared learner leaves its model alone, adaptive scales included,
// and its delta brings them: the first scale of a feature is the largest
// |x| the learner saw of it.
func TestSharedLearnerNeverWritesTheModel(t *testing.T) {
	feats, labels := toyEvents(500)
	m := mustModel(t, Config{HashBits: 12, Normalize: NormalizeNone})
	fresh := snapshotBytes(t, m)
	l := m.NewLearner()
	l.SetShared()
	maxC := 0.0
	for i := range feats {
		l.Learn(feats[i], labels[i])
		maxC = max(maxC, feats[i][0].Value)
	}
	if !bytes.Equal(snapshotBytes(t, m), fresh) || m.Version() != 0 {
		t.Fatal("a shared learner wrote its model")
	}
	d, n := l.AppendDelta(nil)
	if err := m.ApplyDelta(d, uint64(n), 7, nil); err != nil {
		t.Fatal(err)
	}
	slotC := m.Slot(HashName("c"))
	if inv := m.load(slotC*stride + offInv); inv != 1/maxC {
		t.Fatalf("scale of c: 1/%v, want 1/%v", 1/inv, maxC)
	}
	if m.Version() != 7 || m.Updates() != 500 || m.Weight(m.Slot(HashName("a"))) <= 0 {
		t.Fatalf("version %d, updates %d, weight of a %v", m.Version(), m.Updates(), m.Weight(m.Slot(HashName("a"))))
	}
}

// Slot sections that are not a learner's are refused before anything
// changes.
func TestCheckDeltaRefusesMalformedSlots(t *testing.T) {
	m := mustModel(t, Config{HashBits: 4}) // 17 slots
	l := m.NewLearner()
	l.SetShared()
	l.Learn([]Feature{{1, 2}, {3, 4}}, true)
	good, _ := l.AppendDelta(nil)
	if err := m.CheckDelta(good); err != nil {
		t.Fatal(err)
	}
	one := func(slot uint64, flags byte, vals ...float64) []byte {
		b := []byte{1, byte(slot), flags}
		for _, v := range vals {
			b = appendFloat(b, v)
		}
		return b
	}
	for name, d := range map[string][]byte{
		"empty":          nil,
		"count past end": {5, 0, 1},
		"count > slots":  append([]byte{18}, bytes.Repeat([]byte{0, 1, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f}, 18)...),
		"slot 17":        one(17, deltaA, 1),
		"no flags":       one(3, 0),
		"flag 8":         one(3, 8, 1),
		"short float":    one(3, deltaA, 1)[:7],
		"NaN":            one(3, deltaA, math.NaN()),
		"+Inf":           one(3, deltaA, math.Inf(1)),
		"negative n":     one(3, deltaB, -1),
		"tiny scale":     one(3, deltaScale, MinValue/2),
		"flagged 0":      one(3, deltaA, 0),
		"trailing":       append(one(3, deltaA, 1), 0),
		"varint overrun": {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	} {
		if err := m.CheckDelta(d); !errors.Is(err, ErrBadDelta) {
			t.Errorf("%s: %v", name, err)
		}
		if err := m.ApplyDelta(d, 1, 1, nil); err == nil || m.Version() != 0 {
			t.Errorf("%s: applied", name)
		}
	}
}

func appendFloat(b []byte, v float64) []byte {
	u := math.Float64bits(v)
	for i := range 8 {
		b = append(b, byte(u>>(8*i)))
	}
	return b
}

// FuzzApplyDelta: any bytes are applied or refused, never a panic, and a
// refused delta changes nothing.
func FuzzApplyDelta(f *testing.F) {
	m := mustModel(f, Config{HashBits: 6})
	l := m.NewLearner()
	l.SetShared()
	feats, labels := toyEvents(50)
	for i := range feats {
		l.Learn(feats[i], labels[i])
	}
	good, _ := l.AppendDelta(nil)
	f.Add(good)
	f.Add([]byte{1, 3, deltaA | deltaB, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f})
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, data []byte) {
		m := mustModel(t, Config{HashBits: 6})
		m.ApplyDelta(good, 1, 1, nil)
		before := snapshotBytes(t, m)
		if err := m.ApplyDelta(data, 3, 2, NewTracker(m)); err != nil {
			if !bytes.Equal(snapshotBytes(t, m), before) || m.Version() != 1 {
				t.Fatal("a refused delta changed the model")
			}
			return
		}
		m.Predict(feats[0])
	})
}

// BenchmarkDelta measures a partition's encoding of n touched slots
// (AppendDelta) and one node's apply of them (ApplyDelta), plain and
// through a fault-tolerance tracker, on a model of 2^20 slots.
func BenchmarkDelta(b *testing.B) {
	for _, n := range []int{1000, 50_000} {
		for _, tracked := range []bool{false, true} {
			b.Run(fmt.Sprintf("slots=%d/tracked=%v", n, tracked), func(b *testing.B) {
				benchDelta(b, n, tracked)
			})
		}
	}
}

func benchDelta(b *testing.B, n int, tracked bool) {
	m := mustModel(b, Config{HashBits: 20})
	var t *Tracker
	if tracked {
		t = NewTracker(m)
	}
	l := m.NewLearner()
	l.SetShared()
	var buf []byte
	var size int
	var encode, apply time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		fillDelta(l, n, i)
		b.StartTimer()
		start := time.Now()
		d, labelled := l.AppendDelta(buf[:0])
		mid := time.Now()
		if err := m.ApplyDelta(d, uint64(labelled), uint64(i+1), t); err != nil {
			b.Fatal(err)
		}
		encode += mid.Sub(start)
		apply += time.Since(mid)
		l.ClearInFlight()
		buf, size = d, len(d)
	}
	b.ReportMetric(float64(encode.Nanoseconds())/float64(b.N), "encode-ns/op")
	b.ReportMetric(float64(apply.Nanoseconds())/float64(b.N), "apply-ns/op")
	b.ReportMetric(float64(size), "bytes/delta")
	b.ReportMetric(float64(size)/float64(n), "bytes/slot")
}

// fillDelta gives l pending updates of n slots spread over the model, as
// FTRL learning leaves them (z and n increments; a new scale for one slot
// in 16).
func fillDelta(l *Learner, n, round int) {
	d := &l.delta
	d.reserve(n)
	step := (l.m.nslots - 1) / n
	for i := range n {
		e := &d.entries[d.insert(i*step+round%step)]
		e.da, e.db = 0.01*float64(i%7-3)+0.001, 0.0001*float64(i%5+1)
		if i%16 == 0 {
			e.scale = float64(1 + i%100)
		}
	}
	l.pending = 250
}
