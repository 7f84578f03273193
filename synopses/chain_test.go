package synopses

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// sameCounters fails unless got holds exactly want's counters (item, count
// and error per counter id) and totals.
func sameCounters(t *testing.T, what string, got, want *HeavyHitters) {
	t.Helper()
	if got.capacity != want.capacity || len(got.slots) != len(want.slots) || got.total != want.total ||
		got.floor != want.floor || got.widen != want.widen {
		t.Fatalf("%s: %d of %d counters, total %d, floor %d, widen %d; want %d of %d, %d, %d, %d", what,
			len(got.slots), got.capacity, got.total, got.floor, got.widen,
			len(want.slots), want.capacity, want.total, want.floor, want.widen)
	}
	for id := range want.slots {
		g, w := got.slots[id].key, want.slots[id].key
		gc, wc := got.heap[got.pos[id]].count, want.heap[want.pos[id]].count
		if g != w || gc != wc || got.errs[id] != want.errs[id] {
			t.Fatalf("%s: counter %d is %q %d (err %d), want %q %d (err %d)", what, id, g, gc, got.errs[id], w, wc, want.errs[id])
		}
	}
	checkInvariants(t, got)
}

// failingWriter refuses every write, as a full disk would.
type failingWriter struct{}

var errRefused = errors.New("refused")

func (failingWriter) Write([]byte) (int, error) { return 0, errRefused }

// A chain of a full backup and the deltas after it recovers exactly the
// state at the last backup, counter by counter, for random streams mixing
// updates of any weight, merges and widenings, with backups at random
// points, some of them refused by the writer (the next delta must then
// carry what the refused one would have).
func TestHeavyHittersChainRecoversExactly(t *testing.T) {
	for seed := range uint64(12) {
		r := rand.New(rand.NewPCG(seed, 11))
		counters := 1 + r.IntN(300)
		t.Run(fmt.Sprintf("seed%d/counters%d", seed, counters), func(t *testing.T) {
			h := NewHeavyHitters(counters)
			ev := zipfStream(seed, 20_000, 1+r.IntN(5_000), 1.05+r.Float64())
			var chain [][]byte
			for i, e := range ev {
				switch x := r.IntN(1000); {
				case x == 0:
					o := NewHeavyHitters(1 + r.IntN(300))
					feed(o, zipfStream(seed+100, r.IntN(2_000), 3_000, 1.1))
					h.Merge(o)
				case x == 1:
					h.Widen(uint64(r.IntN(50)))
				default:
					h.Update(e.key, e.w+uint64(r.IntN(3))/2*uint64(r.IntN(100)))
				}
				if r.IntN(400) != 0 {
					continue
				}
				full := len(chain) == 0 || r.IntN(8) == 0
				if r.IntN(6) == 0 {
					div := h.StateDivergence()
					if err := h.BackupState(failingWriter{}, full); !errors.Is(err, errRefused) {
						t.Fatalf("event %d: refused backup: %v", i, err)
					}
					if h.StateDivergence() < div {
						t.Fatalf("event %d: a refused backup lowered the divergence from %v to %v", i, div, h.StateDivergence())
					}
					continue
				}
				b := backupBytes(t, h, full)
				if full {
					chain = chain[:0]
				}
				chain = append(chain, b)
				sameCounters(t, fmt.Sprintf("event %d, chain of %d", i, len(chain)), recoverChain(t, chain...), h)
			}
		})
	}
}

// The same for windows: a chain recovers every kept window exactly, also
// after backups the writer refused (the windows' summaries had counted
// those as made).
func TestWindowedChainRecoversExactly(t *testing.T) {
	const size = 1000
	for seed := range uint64(6) {
		r := rand.New(rand.NewPCG(seed, 12))
		h := NewWindowedHH(40, size*time.Millisecond, 2)
		var chain [][]byte
		for i, e := range tsStream(seed, 20_000) {
			h.Update(e.key, 1, e.ts)
			if r.IntN(300) != 0 {
				continue
			}
			full := len(chain) == 0 || r.IntN(6) == 0
			if r.IntN(4) == 0 {
				div := h.StateDivergence()
				if err := h.BackupState(failingWriter{}, full); !errors.Is(err, errRefused) {
					t.Fatalf("seed %d event %d: refused backup: %v", seed, i, err)
				}
				if h.StateDivergence() < div {
					t.Fatalf("seed %d event %d: a refused backup lowered the divergence from %v to %v", seed, i, div, h.StateDivergence())
				}
				continue
			}
			var buf bytes.Buffer
			if err := h.BackupState(&buf, full); err != nil {
				t.Fatal(err)
			}
			if full {
				chain = chain[:0]
			}
			chain = append(chain, buf.Bytes())
			rec := NewWindowedHH(40, size*time.Millisecond, 2)
			for k, b := range chain {
				if err := rec.RecoverState(bytes.NewReader(b)); err != nil {
					t.Fatalf("seed %d event %d: backup %d of %d: %v", seed, i, k, len(chain), err)
				}
			}
			got, want := rec.w.list(), h.w.list()
			if len(got) != len(want) || rec.Late() != h.Late() || rec.Dropped() != h.Dropped() || rec.ClosedCount() != h.ClosedCount() {
				t.Fatalf("seed %d event %d: %d windows, want %d", seed, i, len(got), len(want))
			}
			for k := range want {
				if got[k].idx != want[k].idx {
					t.Fatalf("seed %d event %d: window %d, want %d", seed, i, got[k].idx, want[k].idx)
				}
				sameCounters(t, fmt.Sprintf("seed %d event %d window %d", seed, i, want[k].idx), got[k].s, want[k].s)
			}
		}
	}
}
