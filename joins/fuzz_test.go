package joins

import (
	"bytes"
	"testing"
)

// FuzzRecoverState: any bytes handed to RecoverState either restore a join
// that goes on working or are refused with an error; never a panic.
func FuzzRecoverState(f *testing.F) {
	cfg := Config{Within: 20, Lateness: 5, MaxBytes: MinBytes * 4, Sample: 0.5, Window: 100}
	j, _ := New(cfg)
	var full, delta bytes.Buffer
	for _, e := range genStream(1, 500, 20, 1, 5, 0.05) {
		j.Add(e.side, e.key, e.ts, e.value, e.seq, nil)
	}
	j.BackupState(&full, true)
	for _, e := range genStream(2, 200, 20, 1, 5, 0)[:200] {
		j.Add(e.side, e.key, e.ts+600, e.value, e.seq+1000, nil)
	}
	j.BackupState(&delta, false)
	f.Add(full.Bytes(), []byte{})
	f.Add(full.Bytes(), delta.Bytes())
	f.Add([]byte("MLJN\x01\x00"), []byte{})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		k, _ := New(cfg)
		if k.RecoverState(bytes.NewReader(a)) != nil {
			return
		}
		_ = k.RecoverState(bytes.NewReader(b))
		// Whatever was restored must keep working and stay in budget.
		for i, e := range genStream(3, 300, 20, 1, 5, 0) {
			k.Add(e.side, e.key, e.ts, e.value, uint64(i)+5000, nil)
			if k.StateBytes() > cfg.MaxBytes {
				t.Fatalf("state %d bytes above %d", k.StateBytes(), cfg.MaxBytes)
			}
		}
		open, _ := k.Windows()
		for _, w := range open {
			w.Estimate(cfg.Sample, 0.95)
		}
		var buf bytes.Buffer
		if err := k.BackupState(&buf, true); err != nil {
			t.Fatal(err)
		}
	})
}
