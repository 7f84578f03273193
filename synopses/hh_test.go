package synopses

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

type event struct {
	key string
	w   uint64
}

// keyNames are the item names, substrings of one arena (as items parsed out
// of one batch of events would be), so that reading a key does not cost a
// cache miss of its own.
var keyNames = func() []string {
	k := make([]string, 1_000_000)
	var arena []byte
	for i := range k {
		arena = strconv.AppendInt(append(arena, 'k'), int64(i), 10)
	}
	all := string(arena)
	off := 0
	for i := range k {
		n := 1 + len(strconv.Itoa(i))
		k[i] = all[off : off+n]
		off += n
	}
	return k
}()

// zipfStream draws n items from a Zipf(s) law over a universe of u items.
func zipfStream(seed uint64, n, u int, s float64) []event {
	r := rand.New(rand.NewPCG(seed, 7))
	z := rand.NewZipf(r, s, 1, uint64(u-1))
	ev := make([]event, n)
	for i := range ev {
		// Permute ranks so that key order carries no information.
		ev[i] = event{key: keyNames[(z.Uint64()*7919)%uint64(u)], w: 1}
	}
	return ev
}

// adversarial streams against Space-Saving.
func adversarialStreams(seed uint64) map[string][]event {
	r := rand.New(rand.NewPCG(seed, 11))
	out := map[string][]event{}
	var distinct []event // every item once or twice, many more than counters
	for i := range 20_000 {
		distinct = append(distinct, event{keyNames[i], 1 + uint64(r.IntN(2))})
	}
	out["distinct"] = distinct
	var blocks []event // each item in one contiguous block of random length
	for i := range 3_000 {
		for range 1 + r.IntN(40) {
			blocks = append(blocks, event{keyNames[i], 1})
		}
	}
	out["blocks"] = blocks
	var late []event // a heavy item arriving only at the end
	for i := range 30_000 {
		late = append(late, event{keyNames[r.IntN(10_000)], 1})
		_ = i
	}
	for range 500 {
		late = append(late, event{"heavy-late", 1})
	}
	out["heavy-at-end"] = late
	var weighted []event // weights up to 1000, rotating items
	for i := range 20_000 {
		weighted = append(weighted, event{keyNames[(i*31)%5_000], uint64(1 + r.IntN(1000))})
	}
	out["weighted"] = weighted
	out["zipf"] = zipfStream(seed, 50_000, 20_000, 1.1)
	return out
}

func truth(ev []event) map[string]uint64 {
	m := map[string]uint64{}
	for _, e := range ev {
		m[e.key] += e.w
	}
	return m
}

func feed(h *HeavyHitters, ev []event) {
	for _, e := range ev {
		h.Update(e.key, e.w)
	}
}

// checkBounds fails unless every item's true count is within its bounds,
// tracked or not, and the summary is internally consistent.
func checkBounds(t *testing.T, what string, h *HeavyHitters, exact map[string]uint64) {
	t.Helper()
	checkInvariants(t, h)
	var total uint64
	for k, c := range exact {
		total += c
		it, _ := h.Get(k)
		if c < it.Lower || c > it.Upper {
			t.Fatalf("%s: %q true %d outside [%d, %d]", what, k, c, it.Lower, it.Upper)
		}
	}
	for _, it := range h.Items() {
		if _, ok := exact[it.Key]; !ok && it.Lower > 0 {
			t.Fatalf("%s: %q never seen but lower bound %d", what, it.Key, it.Lower)
		}
	}
	if h.Total() != total {
		t.Fatalf("%s: total %d, want %d", what, h.Total(), total)
	}
}

func checkInvariants(t *testing.T, h *HeavyHitters) {
	t.Helper()
	if h.index.n != len(h.slots) || len(h.heap) != len(h.slots) || len(h.slots) > h.capacity {
		t.Fatalf("sizes: index %d slots %d heap %d cap %d", h.index.n, len(h.slots), len(h.heap), h.capacity)
	}
	for i, e := range h.heap {
		if h.pos[e.id] != int32(i) {
			t.Fatalf("pos of %d", e.id)
		}
		if i > 0 && h.heap[(i-1)/4].count > e.count {
			t.Fatalf("heap order at %d", i)
		}
		if s := h.slots[e.id]; h.index.find(s.key, hashKey(s.key), h.slots) != e.id || h.hashes[e.id] != hashKey(s.key) {
			t.Fatalf("index of %q", h.slots[e.id].key)
		}
		if c := h.slots[e.id].count; c != e.count {
			t.Fatalf("counter %d: count %d in its slot, %d in the order", e.id, c, e.count)
		}
		if e.count < h.floor {
			t.Fatalf("count %d below floor %d", e.count, h.floor)
		}
	}
}

func TestHeavyHittersBounds(t *testing.T) {
	for seed := range uint64(3) {
		for name, ev := range adversarialStreams(seed) {
			for _, counters := range []int{1, 10, 200} {
				h := NewHeavyHitters(counters)
				feed(h, ev)
				checkBounds(t, fmt.Sprintf("%s/%d/seed%d", name, counters, seed), h, truth(ev))
			}
		}
	}
}

func TestHeavyHittersHeavyLateFound(t *testing.T) {
	ev := adversarialStreams(1)["heavy-at-end"]
	h := NewHeavyHitters(100)
	feed(h, ev)
	top := h.TopK(1)
	if top[0].Key != "heavy-late" {
		t.Fatalf("top item %+v, want heavy-late", top[0])
	}
}

// split deals the stream to p partitions: by item hash (as the runtime's
// partitioning by key would) or at random.
func split(ev []event, p int, byKey bool, r *rand.Rand) [][]event {
	parts := make([][]event, p)
	for _, e := range ev {
		i := r.IntN(p)
		if byKey {
			i = int(fnv(e.key) % uint64(p))
		}
		parts[i] = append(parts[i], e)
	}
	return parts
}

func fnv(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

func TestHeavyHittersMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for seed := range uint64(2) {
		for name, ev := range adversarialStreams(seed) {
			exact := truth(ev)
			for p := 2; p <= 8; p += 3 {
				for _, byKey := range []bool{false, true} {
					for _, counters := range []int{10, 200} {
						parts := split(ev, p, byKey, r)
						hs := make([]*HeavyHitters, p)
						for i := range hs {
							hs[i] = NewHeavyHitters(counters)
							feed(hs[i], parts[i])
						}
						what := fmt.Sprintf("%s p=%d byKey=%v counters=%d", name, p, byKey, counters)
						// Left fold.
						m := NewHeavyHitters(counters)
						for _, h := range hs {
							m.Merge(h)
						}
						checkBounds(t, what+" fold", m, exact)
						// Tree of merges, into the partitions themselves.
						for step := 1; step < p; step *= 2 {
							for i := 0; i+step < p; i += 2 * step {
								hs[i].Merge(hs[i+step])
							}
						}
						checkBounds(t, what+" tree", hs[0], exact)
						// Keep going after a merge.
						more := zipfStream(seed+9, 5_000, 2_000, 1.1)
						feed(hs[0], more)
						all := truth(append(slices.Clone(ev), more...))
						checkBounds(t, what+" merged then updated", hs[0], all)
					}
				}
			}
		}
	}
}

func TestHeavyHittersMergeWidened(t *testing.T) {
	ev := zipfStream(3, 20_000, 5_000, 1.1)
	a, b := NewHeavyHitters(50), NewHeavyHitters(50)
	feed(a, ev[:10_000])
	feed(b, ev[10_000:])
	a.Widen(7)
	b.Widen(5)
	a.Merge(b)
	if a.Widened() != 12 {
		t.Fatalf("widened %d", a.Widened())
	}
	checkBounds(t, "widened merge", a, truth(ev))
}

// crash runs ev through a summary that is backed up (full every fullEvery-th
// backup, else delta) every backupEvery events, crashes at crashAt, recovers
// a fresh value from the stored backups, widens it by the weight lost and
// goes on with the rest of the stream. It returns the recovered summary.
func crash(t *testing.T, ev []event, counters, backupEvery, fullEvery, crashAt int) *HeavyHitters {
	t.Helper()
	h := NewHeavyHitters(counters)
	var backups [][]byte
	lastBackupAt := 0
	for i, e := range ev[:crashAt] {
		h.Update(e.key, e.w)
		if (i+1)%backupEvery == 0 {
			var buf bytes.Buffer
			full := len(backups)%fullEvery == 0
			if err := h.BackupState(&buf, full); err != nil {
				t.Fatal(err)
			}
			if full {
				backups = backups[:0]
			}
			backups = append(backups, buf.Bytes())
			lastBackupAt = i + 1
			if h.StateDivergence() != 0 || h.Dirty() != 0 {
				t.Fatal("divergence not reset by the backup")
			}
		}
	}
	var lost uint64
	for _, e := range ev[lastBackupAt:crashAt] {
		lost += e.w
	}
	want := NewHeavyHitters(counters)
	feed(want, ev[:lastBackupAt])

	n := NewHeavyHitters(counters)
	for _, b := range backups {
		if err := n.RecoverState(bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	if lastBackupAt > 0 && !slices.Equal(n.Items(), want.Items()) {
		t.Fatalf("recovered state differs from the state at the last backup")
	}
	checkInvariants(t, n)
	n.Widen(lost)
	feed(n, ev[crashAt:])
	// The lost events are part of the true stream but not of the summary's
	// total; check the bounds against the full stream.
	exact := truth(ev)
	for k, c := range exact {
		it, _ := n.Get(k)
		if c < it.Lower || c > it.Upper {
			t.Fatalf("after recovery: %q true %d outside [%d, %d]", k, c, it.Lower, it.Upper)
		}
	}
	return n
}

func TestHeavyHittersCrashRecovery(t *testing.T) {
	for seed := range uint64(2) {
		for name, ev := range adversarialStreams(seed) {
			r := rand.New(rand.NewPCG(seed, 3))
			for range 4 {
				crashAt := r.IntN(len(ev))
				t.Run(fmt.Sprintf("%s/%d", name, crashAt), func(t *testing.T) {
					crash(t, ev, 100, 1+r.IntN(3000), 1+r.IntN(5), crashAt)
				})
			}
		}
	}
}

func TestHeavyHittersDivergence(t *testing.T) {
	h := NewHeavyHitters(2)
	h.Update("a", 5)
	h.Update("b", 3)
	if d := h.StateDivergence(); d != 5 {
		t.Fatalf("divergence %v, want 5", d)
	}
	if err := h.BackupState(&bytes.Buffer{}, true); err != nil {
		t.Fatal(err)
	}
	h.Update("a", 2)
	if d := h.StateDivergence(); d != 2 {
		t.Fatalf("divergence %v, want 2", d)
	}
	h.Update("c", 1) // evicts b: its counter goes from 3 at the backup to 4
	if d := h.StateDivergence(); d != 2 {
		t.Fatalf("divergence %v, want 2 (a's counter moved most)", d)
	}
	var buf bytes.Buffer
	if err := h.BackupState(&buf, false); err != nil {
		t.Fatal(err)
	}
	if h.StateDivergence() != 0 {
		t.Fatal("not reset")
	}
	if it, _ := h.Get("c"); it.Lower != 1 || it.Upper != 4 || it.Estimate != 4 {
		t.Fatalf("c: %+v", it)
	}
	if h.MaxUntracked() != 4 {
		t.Fatalf("max untracked %d", h.MaxUntracked())
	}
}

// TestTopRecall: 2,000 counters on Zipf(1.1), 1M items over 100k: the top
// 100 by estimate hold ≥ 99 of the true top 100.
func TestTopRecall(t *testing.T) {
	if testing.Short() {
		t.Skip("1M items")
	}
	for seed := range uint64(3) {
		ev := zipfStream(seed, 1_000_000, 100_000, 1.1)
		h := NewHeavyHitters(2000)
		feed(h, ev)
		exact := truth(ev)
		keys := make([]string, 0, len(exact))
		for k := range exact {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int {
			if exact[a] != exact[b] {
				if exact[a] > exact[b] {
					return -1
				}
				return 1
			}
			return 0
		})
		// Items tied with the 100th count are all in the true top 100.
		cut := exact[keys[99]]
		hits := 0
		for _, it := range h.TopK(100) {
			if exact[it.Key] >= cut {
				hits++
			}
		}
		recall := float64(hits) / 100
		t.Logf("seed %d: top-100 recall %.2f, max untracked %d, min counter of top-100 true %d", seed, recall, h.MaxUntracked(), cut)
		if recall < 0.99 {
			t.Fatalf("recall %.2f < 0.99", recall)
		}
		checkBounds(t, "recall stream", h, exact)
	}
}

// recoverChain recovers a fresh summary from backups applied in order.
func recoverChain(t *testing.T, backups ...[]byte) *HeavyHitters {
	t.Helper()
	n := &HeavyHitters{}
	for i, b := range backups {
		if err := n.RecoverState(bytes.NewReader(b)); err != nil {
			t.Fatalf("backup %d: %v", i, err)
		}
	}
	return n
}

func backupBytes(t *testing.T, h *HeavyHitters, full bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := h.BackupState(&buf, full); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A counter that kept its item since the last backup costs the delta its
// position and count increase only: no item bytes, no error.
func TestHeavyHittersDeltaOmitsKeptItems(t *testing.T) {
	h := NewHeavyHitters(500)
	for i := range 500 {
		h.Update(fmt.Sprintf("item-with-a-long-name-%04d", i), uint64(1+i))
	}
	full := backupBytes(t, h, true)
	for i := 0; i < 500; i += 2 {
		h.Update(fmt.Sprintf("item-with-a-long-name-%04d", i), 3)
	}
	delta := backupBytes(t, h, false)
	if bytes.Contains(delta, []byte("item-with")) {
		t.Fatal("delta carries the items of counters that kept them")
	}
	// 250 changed counters: a gap byte and a count byte each, plus totals.
	if len(delta) > 250*2+32 {
		t.Fatalf("delta of 250 increases is %d bytes", len(delta))
	}
	// Evict: the new items must be in the next delta in full.
	h.Update("newcomer-a", 1000) // not the next one evicted
	h.Update("newcomer-b", 1)
	delta2 := backupBytes(t, h, false)
	if !bytes.Contains(delta2, []byte("newcomer-a")) || !bytes.Contains(delta2, []byte("newcomer-b")) {
		t.Fatal("delta lacks the items that took over counters")
	}
	n := recoverChain(t, full, delta, delta2)
	if !slices.Equal(n.Items(), h.Items()) || n.Total() != h.Total() || n.MaxUntracked() != h.MaxUntracked() {
		t.Fatal("recovered state differs")
	}
	checkInvariants(t, n)
}

// appendOldDelta writes a delta in the first format (every dirty counter
// in full, with its id), as backups written before the compact format are.
func appendOldDelta(h *HeavyHitters) []byte {
	b := appendHeader(nil, hhMagic, false)
	for _, v := range []uint64{uint64(h.capacity), uint64(len(h.slots)), h.total, h.floor, h.widen, uint64(len(h.dirty))} {
		b = binary.AppendUvarint(b, v)
	}
	for _, id := range h.dirty {
		c := h.heap[h.pos[id]].count
		b = binary.AppendUvarint(b, uint64(id))
		b = h.appendCounter(b, id, c)
		h.slots[id].backed = c
	}
	h.restartDivergence()
	return b
}

// Deltas of the first format, already on disk, still recover.
func TestHeavyHittersFirstDeltaFormat(t *testing.T) {
	ev := zipfStream(5, 30_000, 3_000, 1.1)
	h := NewHeavyHitters(200)
	feed(h, ev[:10_000])
	full := backupBytes(t, h, true)
	feed(h, ev[10_000:20_000])
	old := appendOldDelta(h)
	feed(h, ev[20_000:])
	n := recoverChain(t, full, old, backupBytes(t, h, false))
	if !slices.Equal(n.Items(), h.Items()) {
		t.Fatal("recovered state differs")
	}
}

// Compact deltas that do not fit the state they are applied to are
// rejected, leaving it unchanged.
func TestHeavyHittersCompactDeltaCorrupt(t *testing.T) {
	h := NewHeavyHitters(4)
	h.Update("a", 2)
	full := backupBytes(t, h, true)
	h.Update("a", 1) // an increase of counter 0
	h.Update("b", 1) // counter 1, new since the full backup
	delta := backupBytes(t, h, false)
	header := appendHeaderKind(nil, hhMagic, kindDelta2)
	totals := delta[len(header) : len(header)+5] // capacity 4, used 2, total 4, floor 0, widen 0
	cases := map[string][]byte{
		// Counter 1 did not exist at the backup: it cannot be an increase.
		"increase of a new counter": append(slices.Concat(header, totals), 2, 0<<1, 1, 0<<1, 1),
		// A gap past the used counters.
		"gap out of range": append(slices.Concat(header, totals), 1, 2<<1, 1),
		// Counter 1 missing.
		"new counter missing": append(slices.Concat(header, totals), 1, 0<<1, 1),
		"truncated":           delta[:len(delta)-1],
	}
	for name, b := range cases {
		n := recoverChain(t, full)
		before := n.Items()
		err := n.RecoverState(bytes.NewReader(b))
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err %v", name, err)
		}
		if !slices.Equal(n.Items(), before) {
			t.Errorf("%s: state changed", name)
		}
	}
	if n := recoverChain(t, full, delta); !slices.Equal(n.Items(), h.Items()) {
		t.Fatal("the valid delta does not recover")
	}
}

// hashKey spreads short keys (the one-multiply path of 4 to 8 bytes among
// them) over the index's home positions, the top bits: 100,000 keys of each
// shape, into 8,192 homes as at 2,000 counters, fill no home beyond a few
// times the mean, and no two keys share the 39 bits the index compares.
func TestHashKeySpread(t *testing.T) {
	shapes := map[string]func(i int) string{
		"k<n>":         func(i int) string { return "k" + strconv.Itoa(i) },
		"8 digits":     func(i int) string { return fmt.Sprintf("%08d", i) },
		"4 bytes":      func(i int) string { return string([]byte{byte(i), byte(i >> 8), byte(i >> 16), 'x'}) },
		"user-<n>":     func(i int) string { return "user-" + strconv.Itoa(i) },
		"long prefix":  func(i int) string { return "customer-" + strconv.Itoa(i) },
		"3 bytes":      func(i int) string { return string([]byte{byte(i), byte(i >> 8), byte(i >> 16)}) },
		"middle bytes": func(i int) string { return fmt.Sprintf("a%05db", i) },
	}
	const n, homes = 100_000, 8192
	for name, key := range shapes {
		seen := make(map[uint64]bool, n)
		var load [homes]int
		for i := range n {
			x := hashKey(key(i))
			if seen[x>>idBits] {
				t.Fatalf("%s: two keys hash alike", name)
			}
			seen[x>>idBits] = true
			load[x>>(64-13)]++
		}
		if m := slices.Max(load[:]); m > 4*n/homes {
			t.Errorf("%s: a home holds %d keys, mean %d", name, m, n/homes)
		}
	}
}
