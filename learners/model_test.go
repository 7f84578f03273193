package learners

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestHash(t *testing.T) {
	if HashName("free") != xxhash.Sum64String("free") {
		t.Error("HashName")
	}
	for _, c := range [][2]string{{"country", "de"}, {"", ""}, {"a", ""}, {"long name with spaces", "value=with=equals"}} {
		if got, want := HashNameValue(c[0], c[1]), HashName(c[0]+"="+c[1]); got != want {
			t.Errorf("HashNameValue(%q, %q) = %x, want %x", c[0], c[1], got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { HashNameValue("country", "de") }); n != 0 {
		t.Errorf("HashNameValue allocates %v", n)
	}
}

// toyEvents returns a small separable-ish stream: feature a pushes towards
// positive, b towards negative, c is noise with raw values up to 1000.
func toyEvents(n int) ([][]Feature, []bool) {
	r := rand.New(rand.NewPCG(1, 1))
	fa, fb, fc := HashName("a"), HashName("b"), HashName("c")
	var fs [][]Feature
	var ls []bool
	for range n {
		pos := r.IntN(2) == 0
		f := []Feature{{fc, r.Float64() * 1000}}
		if pos {
			f = append(f, Feature{fa, 1})
		} else {
			f = append(f, Feature{fb, 2})
		}
		fs = append(fs, f)
		ls = append(ls, pos)
	}
	return fs, ls
}

func TestLearnBasics(t *testing.T) {
	for _, opt := range []string{"ftrl", "adagrad", "sgd"} {
		for _, norm := range []string{"none", "sqrt", "l2", "log1p_l2"} {
			for _, adaptive := range []bool{true, false} {
				cfg := Config{HashBits: 10, Optimizer: opt, Normalize: norm, Adaptive: &adaptive, Clip: 10}
				if !adaptive && norm == "none" {
					continue // raw values of 1000 without scaling: not a fair test
				}
				m, err := NewModel(cfg)
				if err != nil {
					t.Fatal(err)
				}
				l := m.NewLearner()
				fs, ls := toyEvents(3000)
				for i := range fs {
					p := l.Learn(fs[i], ls[i])
					if p <= 0 || p >= 1 || p != p {
						t.Fatalf("%v: probability %v", cfg, p)
					}
					if i%100 == 99 {
						l.Sync()
					}
				}
				l.Sync()
				pa := m.Predict([]Feature{{HashName("a"), 1}, {HashName("c"), 500}})
				pb := m.Predict([]Feature{{HashName("b"), 2}, {HashName("c"), 500}})
				// With l2 the raw noise feature c (up to 1000) dominates the
				// event norm and a, b shrink to ~1e-3: only the order is
				// asked of those settings (and of sgd with log1p_l2: its step decays).
				strong := adaptive && norm != "l2" && (opt != "sgd" || norm == "none")
				if (strong && (pa < 0.75 || pb > 0.25)) || pa <= pb {
					t.Errorf("%s/%s/adaptive=%v: p(a)=%.3f p(b)=%.3f", opt, norm, adaptive, pa, pb)
				}
				if m.Weight(m.Slot(HashName("a"))) <= 0 || m.Weight(m.Slot(HashName("b"))) >= 0 {
					t.Errorf("%s/%s: weights of a and b have the wrong sign", opt, norm)
				}
			}
		}
	}
}

func TestLearnerViewAndSync(t *testing.T) {
	m, _ := NewModel(Config{HashBits: 8})
	l := m.NewLearner()
	f := []Feature{{HashName("x"), 3}}
	if v := l.Sync(); v != 0 || m.Version() != 0 {
		t.Errorf("sync with nothing pending bumped the version to %d", v)
	}
	p0 := l.Learn(f, true)
	if p0 != 0.5 {
		t.Errorf("first prediction %v, want 0.5", p0)
	}
	if l.Pending() != 1 {
		t.Errorf("pending %d", l.Pending())
	}
	// The learner sees its own update, the global model not yet.
	if lp, gp := l.Predict(f), m.Predict(f); lp <= 0.5 || gp != 0.5 {
		t.Errorf("local %v global %v", lp, gp)
	}
	local := l.Predict(f)
	if v := l.Sync(); v != 1 || m.Updates() != 1 || l.Pending() != 0 {
		t.Errorf("after sync version %d updates %d pending %d", v, m.Updates(), l.Pending())
	}
	if gp := m.Predict(f); math.Abs(gp-local) > 1e-15 {
		t.Errorf("global after sync %v, local before %v", gp, local)
	}
	// A second learner sees synced state at once.
	if p := m.NewLearner().Predict(f); p != m.Predict(f) {
		t.Error("fresh learner differs from the global model")
	}
	// Zero and NaN values are skipped; the bias is always there.
	if m.Predict([]Feature{{HashName("y"), 0}, {HashName("z"), math.NaN()}}) != m.Predict(nil) {
		t.Error("zero or NaN feature changed the prediction")
	}
}

func TestAdaptiveRescaleKeepsWeight(t *testing.T) {
	for _, opt := range []string{"ftrl", "adagrad", "sgd"} {
		for _, l1 := range []float64{0, 0.01} {
			m, _ := NewModel(Config{HashBits: 8, Optimizer: opt, L1: l1})
			l := m.NewLearner()
			h := HashName("n")
			for range 50 {
				l.Learn([]Feature{{h, 2}}, true)
			}
			l.Sync()
			for range 5 {
				l.Learn([]Feature{{h, 2}}, true) // some local delta
			}
			slot := m.Slot(h)
			before := l.Predict([]Feature{{h, 2}})
			gBefore := m.Weight(slot)
			// Growing the scale must not change the effective weight.
			r := m.growScale(slot, 100)
			if i := l.delta.find(slot); i >= 0 {
				l.delta.entries[i].da *= r
			}
			if after := l.Predict([]Feature{{h, 2}}); math.Abs(after-before) > 1e-12 {
				t.Errorf("%s l1=%v: local prediction %v -> %v", opt, l1, before, after)
			}
			if after := m.Weight(slot); math.Abs(after-gBefore) > 1e-12*math.Abs(gBefore) {
				t.Errorf("%s l1=%v: global weight %v -> %v", opt, l1, gBefore, after)
			}
		}
	}
}

func TestNoAlloc(t *testing.T) {
	m, _ := NewModel(Config{HashBits: 16, Normalize: "l2", Clip: 1})
	l := m.NewLearner()
	f := make([]Feature, 20)
	for i := range f {
		f[i] = Feature{HashName(string(rune('a' + i))), float64(i + 1)}
	}
	l.Learn(f, true)
	if n := testing.AllocsPerRun(1000, func() { l.Learn(f, false) }); n != 0 {
		t.Errorf("Learn allocates %v", n)
	}
	if n := testing.AllocsPerRun(1000, func() { l.Predict(f) }); n != 0 {
		t.Errorf("Learner.Predict allocates %v", n)
	}
	if n := testing.AllocsPerRun(1000, func() { m.Predict(f) }); n != 0 {
		t.Errorf("Model.Predict allocates %v", n)
	}
}

func trainedModel(t *testing.T, cfg Config) *Model {
	t.Helper()
	m, err := NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := m.NewLearner()
	fs, ls := toyEvents(500)
	for i := range fs {
		l.Learn(append(fs[i], Feature{uint64(i % 37), 1}), ls[i])
		if i%50 == 0 {
			l.Sync()
		}
	}
	l.Sync()
	return m
}

func TestSnapshot(t *testing.T) {
	m := trainedModel(t, Config{HashBits: 12})
	s := m.Snapshot(true, 0)
	if s.Version != m.Version() || s.Updates != 500 || s.HashBits != 12 {
		t.Errorf("header %+v", s)
	}
	if s.NonZero != len(s.Weights) || s.NonZero < 40 {
		t.Errorf("nonzero %d, weights %d", s.NonZero, len(s.Weights))
	}
	for i := 1; i < len(s.Weights); i++ {
		if math.Abs(s.Weights[i].Weight) > math.Abs(s.Weights[i-1].Weight) {
			t.Fatal("weights not sorted by |weight|")
		}
	}
	for _, w := range s.Weights {
		if m.Weight(w.Slot) != w.Weight {
			t.Fatal("snapshot weight differs from Weight")
		}
	}
	top := m.Snapshot(true, 5)
	if len(top.Weights) != 5 || top.NonZero != s.NonZero || top.Weights[0] != s.Weights[0] {
		t.Errorf("limited snapshot %+v", top)
	}
	if n := m.Snapshot(false, 0); n.Weights != nil || n.NonZero != s.NonZero {
		t.Error("snapshot without weights")
	}
	if m.Weight(m.BiasSlot()) == 0 || m.Weight(-1) != 0 || m.Weight(m.Slots()) != 0 {
		t.Error("bias or out-of-range weight")
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	for _, opt := range []string{"ftrl", "adagrad", "sgd"} {
		m := trainedModel(t, Config{HashBits: 12, Optimizer: opt, L1: 0.001})
		var buf bytes.Buffer
		n, err := m.WriteTo(&buf)
		if err != nil || n != int64(buf.Len()) {
			t.Fatalf("WriteTo: %d, %v (len %d)", n, err, buf.Len())
		}
		snap := buf.Bytes()
		buf.WriteString("trailing data") // ReadFrom must not read past the snapshot

		r, _ := NewModel(Config{HashBits: 12, Optimizer: opt, L1: 0.001})
		// Existing state is replaced, not added to.
		r.NewLearner().Learn([]Feature{{1234, 1}}, true)
		rl := r.NewLearner()
		rl.Learn([]Feature{{99, 5}}, true)
		rl.Sync()
		got, err := r.ReadFrom(&buf)
		if err != nil || got != int64(len(snap)) {
			t.Fatalf("ReadFrom: %d, %v, want %d", got, err, len(snap))
		}
		if buf.String() != "trailing data" {
			t.Error("ReadFrom read past the snapshot")
		}
		if r.Version() != m.Version() || r.Updates() != m.Updates() {
			t.Errorf("version/updates %d/%d, want %d/%d", r.Version(), r.Updates(), m.Version(), m.Updates())
		}
		for s := 0; s < m.Slots(); s++ {
			if r.Weight(s) != m.Weight(s) {
				t.Fatalf("%s: slot %d weight %v, want %v", opt, s, r.Weight(s), m.Weight(s))
			}
		}
		for i := range r.state {
			if r.state[i] != m.state[i] {
				t.Fatalf("%s: state word %d differs", opt, i)
			}
		}
		// Learning goes on from the restored state identically.
		fs, ls := toyEvents(10)
		la, lb := m.NewLearner(), r.NewLearner()
		for i := range fs {
			if la.Learn(fs[i], ls[i]) != lb.Learn(fs[i], ls[i]) {
				t.Fatal("restored model learns differently")
			}
		}
	}
}

func TestReadFromErrors(t *testing.T) {
	m := trainedModel(t, Config{HashBits: 12})
	var buf bytes.Buffer
	if _, err := m.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	snap := buf.Bytes()
	off := false
	cases := []struct {
		name string
		cfg  Config
		data []byte
		want error
	}{
		{"hash bits", Config{HashBits: 13}, snap, ErrIncompatible},
		{"optimizer", Config{HashBits: 12, Optimizer: "sgd"}, snap, ErrIncompatible},
		{"adaptive", Config{HashBits: 12, Adaptive: &off}, snap, ErrIncompatible},
		{"empty", Config{HashBits: 12}, nil, ErrCorrupt},
		{"magic", Config{HashBits: 12}, append([]byte("XXXXXXXX"), snap[8:]...), ErrCorrupt},
		{"truncated", Config{HashBits: 12}, snap[:len(snap)-10], ErrCorrupt},
		{"flipped bit", Config{HashBits: 12}, flip(snap, len(snap)-20), ErrCorrupt},
		{"bad checksum", Config{HashBits: 12}, flip(snap, len(snap)-1), ErrCorrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := NewModel(tc.cfg)
			l := r.NewLearner()
			l.Learn([]Feature{{7, 1}}, true)
			l.Sync()
			before := r.Weight(r.Slot(7))
			_, err := r.ReadFrom(bytes.NewReader(tc.data))
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if r.Weight(r.Slot(7)) != before || r.Version() != 1 {
				t.Error("failed ReadFrom changed the model")
			}
		})
	}
}

func flip(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 0x10
	return c
}

func FuzzReadFrom(f *testing.F) {
	m, _ := NewModel(Config{HashBits: 4})
	l := m.NewLearner()
	l.Learn([]Feature{{1, 2}, {3, 4}}, true)
	l.Sync()
	var buf bytes.Buffer
	m.WriteTo(&buf)
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		r, _ := NewModel(Config{HashBits: 4})
		if _, err := r.ReadFrom(bytes.NewReader(data)); err != nil {
			return
		}
		var out bytes.Buffer
		if _, err := r.WriteTo(&out); err != nil {
			t.Fatal(err)
		}
		r.Predict([]Feature{{1, 2}})
	})
}
