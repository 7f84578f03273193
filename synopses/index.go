package synopses

import "math/bits"

// index maps an item to its counter id: open addressing with linear
// probing over one []uint64 at load ≤ 1/4 (expected 1.2 probes for a
// hit, 1.4 for a miss), each word holding the top 39 bits of the item's
// hash and id+1 in the low 25 bits (0 = empty). Why not a Go map: with
// 2,000 counters the table is 64 KiB (L2 resident, hot entries in L1),
// an eviction deletes by the stored hash without reading the evicted item's
// bytes, and a lookup reads the item's bytes once for the hash and compares
// them only when 39 bits of hash match. Deletion shifts entries back (no
// tombstones), so probe chains stay short under constant eviction.
type index struct {
	words []uint64
	shift uint // 64 - log2(len(words)): the home of hash x is x >> shift
	n     int
}

const (
	idBits = 25 // id+1 ≤ MaxCounters = 1<<24 fits
	idMask = 1<<idBits - 1
)

// hashKey is a small wyhash-style hash (64×64→128-bit multiply and fold)
// for the index only: it is never stored in a backup, so it may change.
// It is inlined into Update's hot path, where xxhash's call and tail loop
// cost more than the probe for the short items heavy hitters count; items
// of 4 to 8 bytes, the commonest, take one multiply instead of two.
func hashKey(s string) uint64 {
	const p0, p1, p2 = 0xa0761d6478bd642f, 0xe7037ed1a0b428db, 0x8ebc6af09c88c6e3
	n := len(s)
	var a, b uint64
	switch {
	case n > 16:
		h := uint64(p0)
		for i := 0; i+16 < n; i += 16 {
			h = mix(le64(s[i:])^p1, le64(s[i+8:])^h)
		}
		a, b = le64(s[n-16:]), le64(s[n-8:])^h
	case n >= 4 && n <= 8:
		// One multiply: the two (overlapping) 4-byte words hold every byte.
		return mix(le32(s)<<32|le32(s[n-4:])^p1, p2^uint64(n))
	case n >= 4:
		q := (n >> 3) << 2
		a = le32(s)<<32 | le32(s[q:])
		b = le32(s[n-4:])<<32 | le32(s[n-4-q:])
	case n > 0:
		a = uint64(s[0])<<16 | uint64(s[n>>1])<<8 | uint64(s[n-1])
	}
	return mix(p1^uint64(n), mix(a^p1, b^p2))
}

func le32(s string) uint64 {
	_ = s[3]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}

func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func newIndex(capacity int) index {
	size := 1 << bits.Len(uint(4*max(capacity, 1)-1)) // ≥ 4·capacity
	size = max(size, 8)
	return index{words: make([]uint64, size), shift: uint(64 - bits.TrailingZeros(uint(size)))}
}

// find returns the id of key (with hash x), or -1.
func (t *index) find(key string, x uint64, slots []hhSlot) int32 {
	id, _ := t.lookup(key, x, slots)
	return id
}

// lookup returns the id of key (with hash x), or -1 and the empty position
// where insertAt can put it (valid until the table changes).
func (t *index) lookup(key string, x uint64, slots []hhSlot) (int32, uint64) {
	tag := x &^ idMask
	mask := uint64(len(t.words) - 1)
	for i := x >> t.shift; ; i = (i + 1) & mask {
		w := t.words[i]
		if w == 0 {
			return -1, i
		}
		if w&^idMask == tag {
			id := int32(w&idMask) - 1
			if slots[id].key == key {
				return id, 0
			}
		}
	}
}

// insertAt adds id under hash x at the position lookup returned for it.
func (t *index) insertAt(i, x uint64, id int32) {
	t.words[i] = x&^idMask | uint64(id+1)
	t.n++
}

// insert adds id under hash x; the key must not be present.
func (t *index) insert(x uint64, id int32) {
	mask := uint64(len(t.words) - 1)
	i := x >> t.shift
	for t.words[i] != 0 {
		i = (i + 1) & mask
	}
	t.words[i] = x&^idMask | uint64(id+1)
	t.n++
}

// remove deletes id, stored under hash x.
func (t *index) remove(x uint64, id int32) {
	mask := uint64(len(t.words) - 1)
	w := x&^idMask | uint64(id+1)
	i := x >> t.shift
	for t.words[i] != w {
		if t.words[i] == 0 {
			return
		}
		i = (i + 1) & mask
	}
	// Backward-shift deletion: move later entries of the run into the hole
	// when their home is not in (hole, their position].
	for {
		t.words[i] = 0
		j := i
		for {
			j = (j + 1) & mask
			wj := t.words[j]
			if wj == 0 {
				t.n--
				return
			}
			home := wj >> t.shift
			// wj may move to i unless home lies cyclically in (i, j].
			if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
				t.words[i] = wj
				i = j
				break
			}
		}
	}
}

func (t *index) clear() {
	clear(t.words)
	t.n = 0
}

func (t *index) clone() index {
	c := *t
	c.words = append([]uint64(nil), t.words...)
	return c
}
