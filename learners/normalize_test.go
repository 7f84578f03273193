package learners

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"testing"
)

func TestSqrtTail(t *testing.T) {
	for v, want := range map[float64]float64{
		0: 0, 0.25: 0.25, -0.5: -0.5, 1: 1, -1: -1, 4: 2, -9: -3, 1e6: 1e3,
		math.Inf(1): math.Inf(1), math.Inf(-1): math.Inf(-1),
	} {
		if got := sqrtTail(v); got != want {
			t.Errorf("sqrtTail(%v) = %v, want %v", v, got, want)
		}
	}
	if got := sqrtTail(math.NaN()); !math.IsNaN(got) {
		t.Errorf("sqrtTail(NaN) = %v", got)
	}
}

// sqrtEvents are toy events whose values span both sides of ±1.
func sqrtEvents(n int) ([][]Feature, []bool) {
	fs, ls := toyEvents(n)
	for i := range fs {
		fs[i] = append(fs[i], Feature{HashName("count"), float64(i%40) - 3}, Feature{HashName("frac"), float64(i%7) / 10})
	}
	return fs, ls
}

// The default (sqrt) model learns exactly what a raw model learns from the
// values already transformed, and its Predict, Explain and Learner agree.
func TestSqrtIsTheDefaultAndIsPerValue(t *testing.T) {
	if got := DefaultConfig().Normalize; got != NormalizeSqrt {
		t.Fatalf("default normalize %q", got)
	}
	fs, ls := sqrtEvents(2000)
	def := mustModel(t, Config{HashBits: 12})
	raw := mustModel(t, Config{HashBits: 12, Normalize: NormalizeNone})
	ld, lr := def.NewLearner(), raw.NewLearner()
	for i := range fs {
		tf := make([]Feature, len(fs[i]))
		for j, f := range fs[i] {
			tf[j] = Feature{f.Hash, sqrtTail(f.Value)}
		}
		if pd, pr := ld.Learn(fs[i], ls[i]), lr.Learn(tf, ls[i]); pd != pr {
			t.Fatalf("event %d: sqrt model predicted %v, raw model on sqrt values %v", i, pd, pr)
		}
		if i%100 == 0 {
			ld.Sync()
			lr.Sync()
		}
	}
	ld.Sync()
	ev := []Feature{{HashName("count"), 30}, {HashName("frac"), 0.5}, {HashName("a"), 1}}
	p := def.Predict(ev)
	if p != ld.Predict(ev) || p != def.Explain(ev).P {
		t.Errorf("Predict %v, Learner.Predict %v, Explain %v", p, ld.Predict(ev), def.Explain(ev).P)
	}
	if x := def.Explain(ev).Terms[0].Value; x != math.Sqrt(30) {
		t.Errorf("explained value of 30: %v", x)
	}
}

// snapshotOf is m's full snapshot.
func snapshotOf(t *testing.T, m *Model) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := m.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// asFormat1 rewrites a format 2 snapshot as format 1 wrote it: no
// normalize byte.
func asFormat1(snap []byte) []byte {
	v1 := append(append(append([]byte(nil), snapshotMagicV1[:]...), snap[8:headerSizeV1]...), snap[headerSize:len(snap)-4]...)
	return binary.LittleEndian.AppendUint32(v1, crc32.Checksum(v1, crcTable))
}

// A snapshot carries its normalization: a model that left Normalize to
// the default takes it (none for a format 1 snapshot, written when none
// was the default), one that set it refuses another.
func TestSnapshotNormalization(t *testing.T) {
	rawModel := trainedModel(t, Config{HashBits: 12, Normalize: NormalizeNone})
	raw := snapshotOf(t, rawModel)
	sqrt := snapshotOf(t, trainedModel(t, Config{HashBits: 12}))
	ev := []Feature{{HashName("c"), 25}}
	cases := []struct {
		name      string
		cfg       Config
		snap      []byte
		want      string // the model's normalize after ReadFrom
		wantError error
	}{
		{"default reads none", Config{HashBits: 12}, raw, NormalizeNone, nil},
		{"default reads sqrt", Config{HashBits: 12}, sqrt, NormalizeSqrt, nil},
		{"default reads format 1", Config{HashBits: 12}, asFormat1(sqrt), NormalizeNone, nil},
		{"explicit sqrt reads format 1", Config{HashBits: 12, Normalize: NormalizeSqrt}, asFormat1(raw), NormalizeSqrt, nil},
		{"explicit sqrt refuses none", Config{HashBits: 12, Normalize: NormalizeSqrt}, raw, NormalizeSqrt, ErrIncompatible},
		{"explicit l2 refuses sqrt", Config{HashBits: 12, Normalize: NormalizeL2}, sqrt, NormalizeL2, ErrIncompatible},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := mustModel(t, tc.cfg)
			_, err := m.ReadFrom(bytes.NewReader(tc.snap))
			if !errors.Is(err, tc.wantError) {
				t.Fatalf("ReadFrom: %v, want %v", err, tc.wantError)
			}
			if got := m.Config().Normalize; got != tc.want {
				t.Errorf("normalize %q, want %q", got, tc.want)
			}
			if tc.name == "default reads none" && m.Predict(ev) != rawModel.Predict(ev) {
				t.Error("the restored model predicts otherwise than the one backed up")
			}
		})
	}
	bad := append([]byte(nil), sqrt...)
	bad[headerSizeV1] = 9
	bad = binary.LittleEndian.AppendUint32(bad[:len(bad)-4], crc32.Checksum(bad[:len(bad)-4], crcTable))
	if _, err := mustModel(t, Config{HashBits: 12}).ReadFrom(bytes.NewReader(bad)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("normalization 9: %v, want ErrCorrupt", err)
	}
	if n, err := SnapshotCount(asFormat1(raw)); err != nil || n == 0 {
		t.Errorf("SnapshotCount of format 1: %d, %v", n, err)
	}
}

// UseNormalize changes a defaulted model only.
func TestUseNormalize(t *testing.T) {
	m := mustModel(t, Config{HashBits: 4})
	if err := m.UseNormalize(NormalizeLog1pL2); err != nil || m.Config().Normalize != NormalizeLog1pL2 {
		t.Fatalf("defaulted: %v, normalize %q", err, m.Config().Normalize)
	}
	var pe *ParamError
	if err := m.UseNormalize("cube"); !errors.As(err, &pe) {
		t.Errorf("unknown name: %v", err)
	}
	e := mustModel(t, Config{HashBits: 4, Normalize: NormalizeNone})
	if err := e.UseNormalize(NormalizeSqrt); !errors.Is(err, ErrIncompatible) || e.Config().Normalize != NormalizeNone {
		t.Errorf("explicit: %v, normalize %q", err, e.Config().Normalize)
	}
	if err := e.UseNormalize(NormalizeNone); err != nil {
		t.Errorf("same normalization: %v", err)
	}
}
