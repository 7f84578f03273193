package learners

import "math/bits"

// deltaMap is a Learner's local delta: for each slot touched since the last
// sync, the increments of the state words A and B. It is an open-addressing
// hash table with linear probing (load factor at most 1/2), sized by the
// number of slots touched between syncs, not by 2^HashBits: the working set
// of a realistic vocabulary stays in the CPU caches next to the global
// model, and a Learner costs kilobytes instead of 16 bytes per slot.
type deltaMap struct {
	entries []deltaEntry
	used    []uint32 // indices of occupied entries, in insertion order
	shift   uint     // 64 - log2(len(entries))
}

type deltaEntry struct {
	key    uint64 // slot+1; 0 = empty
	da, db float64
	// scale is, for a shared learner (share.go), the largest |x| seen
	// beyond the model's scale of the slot, 0 if none; it also pads the
	// entry to 32 bytes, so that an entry never straddles a cache line.
	scale float64
}

// hashMul is the multiplier of the Fibonacci hash that maps a slot to its
// home entry.
const hashMul = 0x9E3779B97F4A7C15

const minDeltaCap = 1 << 12

func newDeltaMap() deltaMap {
	return deltaMap{entries: make([]deltaEntry, minDeltaCap), used: make([]uint32, 0, minDeltaCap/2), shift: 64 - 12}
}

func (d *deltaMap) home(slot int) int {
	return int((uint64(slot) * hashMul) >> d.shift)
}

// find returns the index of slot's entry, or -1.
func (d *deltaMap) find(slot int) int {
	key := uint64(slot) + 1
	mask := len(d.entries) - 1
	for i := d.home(slot); ; i = (i + 1) & mask {
		switch d.entries[i].key {
		case key:
			return i
		case 0:
			return -1
		}
	}
}

// lookup is insert for the hot loops, which pass the table's fields in
// registers: it returns the index of slot's entry, adding an empty one if
// needed, without a call (the caller must have called reserve, so used
// has room: no append).
func (d *deltaMap) lookup(slot uint64, entries []deltaEntry, dmask uint64, shift uint) uint64 {
	key := slot + 1
	h := slot * hashMul >> shift
	for {
		e := &entries[h]
		if e.key == key {
			return h
		}
		if e.key == 0 {
			e.key = key
			u := len(d.used)
			d.used = d.used[:u+1]
			d.used[u] = uint32(h)
			return h
		}
		h = (h + 1) & dmask
	}
}

// insert returns the index of slot's entry, adding an empty one if needed.
// The caller must have called reserve.
func (d *deltaMap) insert(slot int) int {
	key := uint64(slot) + 1
	mask := len(d.entries) - 1
	for i := d.home(slot); ; i = (i + 1) & mask {
		switch d.entries[i].key {
		case key:
			return i
		case 0:
			d.entries[i].key = key
			d.used = append(d.used, uint32(i))
			return i
		}
	}
}

// reserve makes room for n more entries without growing during inserts, so
// that indices returned by find stay valid.
func (d *deltaMap) reserve(n int) {
	if 2*(len(d.used)+n) <= len(d.entries) {
		return
	}
	old, oldUsed := d.entries, d.used
	size := len(d.entries)
	for 2*(len(d.used)+n) > size {
		size *= 2
	}
	d.entries = make([]deltaEntry, size)
	d.used = make([]uint32, 0, size/2) // reserve keeps len(used) <= size/2: appends never grow it
	d.shift = uint(64 - bits.TrailingZeros(uint(size)))
	for _, i := range oldUsed {
		e := old[i]
		j := d.insert(int(e.key - 1))
		d.entries[j].da, d.entries[j].db, d.entries[j].scale = e.da, e.db, e.scale
	}
}

// get returns the delta of slot (zero if untouched).
func (d *deltaMap) get(slot int) (da, db float64) {
	if i := d.find(slot); i >= 0 {
		return d.entries[i].da, d.entries[i].db
	}
	return 0, 0
}

// addTo returns a and b plus slot's delta.
func (d *deltaMap) addTo(slot uint64, a, b float64) (float64, float64) {
	if i := d.find(int(slot)); i >= 0 {
		e := &d.entries[i]
		return a + e.da, b + e.db
	}
	return a, b
}

// addAll adds every entry of o into d.
func (d *deltaMap) addAll(o *deltaMap) {
	d.reserve(len(o.used))
	for _, i := range o.used {
		e := &o.entries[i]
		f := &d.entries[d.insert(int(e.key-1))]
		f.da += e.da
		f.db += e.db
		f.scale = max(f.scale, e.scale)
	}
}

// reset empties the map, keeping its capacity.
func (d *deltaMap) reset() {
	for _, i := range d.used {
		d.entries[i] = deltaEntry{}
	}
	d.used = d.used[:0]
}
