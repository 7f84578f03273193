package joins

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// Side is the stream a tuple comes from.
type Side uint8

// The two sides of a join.
const (
	Left  Side = 0
	Right Side = 1
)

func (s Side) String() string {
	if s == Left {
		return "left"
	}
	return "right"
}

// Config configures a Join. Durations are event-time milliseconds.
type Config struct {
	// Within is the join interval: |l.ts − r.ts| ≤ Within matches.
	Within int64
	// Lateness is how far behind the highest event time seen a tuple may
	// arrive and still be joined.
	Lateness int64
	// MaxBytes bounds the state (TupleBytes per ring slot, IndexBytes per
	// key). At least MinBytes.
	MaxBytes int64
	// Sample is the probability p in (0, 1] that a tuple is kept (default 1).
	Sample float64
	// Window is the size of the tumbling event-time windows of the
	// estimates; 0 estimates over the whole stream.
	Window int64
	// Keep is how many closed windows are kept for queries (default 3).
	Keep int
	// Seed makes the sample of one join differ from another's.
	Seed uint64
	// ValueSide is the side whose tuple value is a pair's value for SUM
	// and AVG.
	ValueSide Side
}

// TupleBytes is the state cost of one ring slot, IndexBytes of one key in
// the index (a Go map entry of 24 bytes at a load factor down to 7/16,
// plus its control byte), MinBytes the smallest budget.
const (
	TupleBytes = int64(unsafe.Sizeof(tuple{}))
	IndexBytes = 64
	MinBytes   = 64 * (TupleBytes + IndexBytes)
)

// Validate fills the defaults (Sample 1, Keep 3) and checks the config.
func (c *Config) Validate() error {
	if c.Sample == 0 {
		c.Sample = 1
	}
	if c.Keep == 0 {
		c.Keep = 3
	}
	switch {
	case c.Within < 0:
		return fmt.Errorf("within must not be negative, got %d ms", c.Within)
	case c.Lateness < 0:
		return fmt.Errorf("allowed lateness must not be negative, got %d ms", c.Lateness)
	case c.MaxBytes < MinBytes:
		return fmt.Errorf("max state must be at least %d bytes, got %d", MinBytes, c.MaxBytes)
	case !(c.Sample > 0 && c.Sample <= 1):
		return fmt.Errorf("sample must be in (0, 1], got %v", c.Sample)
	case c.Window < 0:
		return fmt.Errorf("window must not be negative, got %d ms", c.Window)
	case c.Keep < 0:
		return fmt.Errorf("keep must not be negative, got %d", c.Keep)
	}
	return nil
}

// Match is one joined pair.
type Match struct {
	Key        string  `json:"key"`
	LeftTS     int64   `json:"left_ts"`
	RightTS    int64   `json:"right_ts"`
	LeftValue  float64 `json:"left_value"`
	RightValue float64 `json:"right_value"`
}

// tuple is one buffered tuple: 48 bytes.
type tuple struct {
	hash  uint64
	ts    int64
	value float64
	acc   float64 // A_i: sum of pair values of the tuple's matches in window win
	next  int32   // ring index of the next tuple of the same key and side; -1 none
	m     int32   // m_i: the tuple's matches in window win
	win   uint32  // low bits of the window index m and acc count for
	meta  uint32  // side in the top bit; the backup epoch of the last change below
}

const sideBit = 1 << 31

func (t *tuple) side() Side { return Side(t.meta >> 31) }

// chain is the list of one key's tuples on one side, oldest first.
type chain struct{ head, tail int32 }

type keyIndex [2]chain

var emptyIndex = keyIndex{{-1, -1}, {-1, -1}}

// Counters are a join's running totals.
type Counters struct {
	Seen     uint64  `json:"seen"`    // tuples offered
	Sampled  uint64  `json:"sampled"` // tuples kept by the sample (all without sampling)
	Matches  uint64  `json:"matches"`
	Late     uint64  `json:"late"`
	Expired  uint64  `json:"expired"` // left the state past watermark − within
	Evicted  uint64  `json:"evicted"` // left the state early for max_state
	MaxTS    int64   `json:"max_ts"`
	Lost     float64 `json:"lost"` // tuples lost in crashes (Widen)
	Recovers int     `json:"recoveries"`
}

// Add sums the counters of another partition into c.
func (c *Counters) Add(o *Counters) {
	c.Seen += o.Seen
	c.Sampled += o.Sampled
	c.Matches += o.Matches
	c.Late += o.Late
	c.Expired += o.Expired
	c.Evicted += o.Evicted
	c.Lost += o.Lost
	c.Recovers += o.Recovers
	c.MaxTS = max(c.MaxTS, o.MaxTS)
}

// Join is a windowed symmetric hash join of two streams.
type Join struct {
	cfg       Config
	threshold uint64 // keep a tuple when its sample hash is below
	maxTuples int

	ring     []tuple
	head     int    // ring index of the oldest tuple
	n        int    // tuples in the ring
	frontAbs uint64 // absolute number of the oldest tuple (tuples ever buffered before it)
	index    map[uint64]keyIndex
	track    bool // per-tuple counts for the variance (only when sampling)

	c       Counters
	started bool // c.MaxTS is set

	wins   []*Acc // open windows, ascending start; one whole-stream Acc when Window is 0
	closed []*Acc // closed windows, ascending, at most Keep

	// backups
	epoch      uint32   // backups taken; a tuple changed since has this in meta
	backedTail uint64   // absolute number past the last tuple in the last backup
	dirty      []uint64 // absolute numbers of tuples whose counts changed since it
	div        int64    // tuples added or removed since it
	scratch    []byte   // BackupState's encoding, reused
	changed    []uint64 // BackupState's list of changed counts, reused
}

// New returns an empty join.
func New(cfg Config) (*Join, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	j := &Join{cfg: cfg, index: map[uint64]keyIndex{}, track: cfg.Sample < 1}
	j.maxTuples = int(cfg.MaxBytes / (TupleBytes + IndexBytes))
	j.threshold = math.MaxUint64
	if cfg.Sample < 1 {
		j.threshold = uint64(cfg.Sample * (1 << 63) * 2)
	}
	if cfg.Window == 0 {
		j.wins = []*Acc{{}}
	}
	return j, nil
}

// Z is the two-sided normal quantile of a confidence level.
func Z(confidence float64) float64 { return math.Sqrt2 * math.Erfinv(confidence) }

// Counters returns the running totals.
func (j *Join) Counters() Counters { return j.c }

// Tuples is the number of buffered tuples.
func (j *Join) Tuples() int { return j.n }

// MaxTuples is the most tuples MaxBytes allows.
func (j *Join) MaxTuples() int { return j.maxTuples }

// StateBytes is the state's accounted size, never above MaxBytes.
func (j *Join) StateBytes() int64 {
	return int64(len(j.ring))*TupleBytes + int64(len(j.index))*IndexBytes
}

// Watermark is the highest event time seen minus the lateness; tuples
// older are late. It is math.MinInt64 before the first tuple.
func (j *Join) Watermark() int64 {
	if !j.started {
		return math.MinInt64
	}
	return j.c.MaxTS - j.cfg.Lateness
}

// mix is SplitMix64's finaliser: sample decisions from sequence numbers.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Sampled reports whether the tuple with this sequence number and side is
// in the sample.
func (j *Join) Sampled(seq uint64, side Side) bool {
	if j.threshold == math.MaxUint64 {
		return true
	}
	return mix((seq*2+uint64(side))*0x9e3779b97f4a7c15+mix(j.cfg.Seed)) < j.threshold
}

// Add offers one tuple in arrival order: seq must be unique per join (the
// runtime's per-partition sequence number). It calls emit for every match,
// if emit is not nil, and reports whether the tuple was late.
func (j *Join) Add(side Side, key string, ts int64, value float64, seq uint64, emit func(*Match)) (late bool) {
	j.c.Seen++
	if !j.started || ts > j.c.MaxTS {
		j.c.MaxTS, j.started = ts, true
		j.expire()
		if j.cfg.Window > 0 {
			j.closeWindows()
		}
	} else if ts < j.c.MaxTS-j.cfg.Lateness {
		j.c.Late++
		return true
	}
	var acc *Acc
	if j.cfg.Window > 0 {
		acc = j.window(j.windowOf(ts))
	} else {
		acc = j.wins[0]
	}
	acc.Seen[side]++
	if !j.Sampled(seq, side) {
		return false
	}
	acc.Sampled[side]++
	j.c.Sampled++
	h := xxhash.Sum64String(key)
	ix, ok := j.index[h]
	if !ok {
		ix = emptyIndex
	}
	nt := tuple{hash: h, ts: ts, value: value, next: -1, meta: uint32(side) << 31}
	for i := ix[1-side].head; i >= 0; {
		t := &j.ring[i]
		if d := t.ts - ts; d <= j.cfg.Within && d >= -j.cfg.Within {
			j.matched(&nt, t, i, key, emit)
		}
		i = t.next
	}
	j.insert(&nt, &ix)
	j.index[h] = ix
	return false
}

// matched counts the match of the new tuple nt with the buffered tuple t
// (at ring index i) and emits it.
func (j *Join) matched(nt, t *tuple, i int32, key string, emit func(*Match)) {
	j.c.Matches++
	l, r := nt, t
	if nt.side() == Right {
		l, r = t, nt
	}
	y := l.value
	if j.cfg.ValueSide == Right {
		y = r.value
	}
	later := max(nt.ts, t.ts)
	var acc *Acc
	var w uint32
	if j.cfg.Window > 0 {
		idx := j.windowOf(later)
		acc, w = j.window(idx), uint32(idx)
	} else {
		acc = j.wins[0]
	}
	acc.M++
	acc.Sy += y
	acc.Syy += y * y
	if j.track {
		acc.countShared(nt, w, y)
		acc.countShared(t, w, y)
		if t.meta&^sideBit != j.epoch {
			t.meta = t.meta&sideBit | j.epoch
			j.dirty = append(j.dirty, j.absOf(int(i)))
		}
	}
	if emit != nil {
		emit(&Match{Key: key, LeftTS: l.ts, RightTS: r.ts, LeftValue: l.value, RightValue: r.value})
	}
}

// countShared adds to the sums over pairs of matches that share tuple t
// one more match of t with pair value y.
func (a *Acc) countShared(t *tuple, w uint32, y float64) {
	if t.win != w {
		t.win, t.m, t.acc = w, 0, 0
	}
	m := float64(t.m)
	a.Q11 += 2 * m
	a.Qyy += 2 * t.acc * y
	a.Qy1 += t.acc + y*m
	t.m++
	t.acc += y
}

// insert buffers nt at the ring's back and appends it to its key's chain.
func (j *Join) insert(nt *tuple, ix *keyIndex) {
	if j.n == len(j.ring) && !j.grow(ix) {
		// Full: evict the oldest. If it is of this key, ix must see it go.
		j.evictFront(true, ix, nt.hash)
	}
	i := int32((j.head + j.n) % len(j.ring))
	nt.meta = nt.meta&sideBit | j.epoch
	j.ring[i] = *nt
	j.n++
	s := nt.side()
	if ix[s].tail >= 0 {
		j.ring[ix[s].tail].next = i
	} else {
		ix[s].head = i
	}
	ix[s].tail = i
	j.div++
}

// grow doubles the ring up to maxTuples, keeping the index budget: it
// reports false when the ring may not grow. ix is a copy of an index entry
// the caller holds, remapped with the map's.
func (j *Join) grow(ix *keyIndex) bool {
	newCap := min(max(2*len(j.ring), 1024), j.maxTuples)
	if newCap <= len(j.ring) {
		return false
	}
	old, oldCap := j.ring, len(j.ring)
	j.ring = make([]tuple, newCap)
	remap := func(i int32) int32 {
		if i < 0 {
			return i
		}
		return int32((int(i) - j.head + oldCap) % oldCap)
	}
	for k := 0; k < j.n; k++ {
		t := old[(j.head+k)%oldCap]
		t.next = remap(t.next)
		j.ring[k] = t
	}
	for h, e := range j.index {
		for s := range e {
			e[s] = chain{remap(e[s].head), remap(e[s].tail)}
		}
		j.index[h] = e
	}
	if ix != nil {
		for s := range ix {
			ix[s] = chain{remap(ix[s].head), remap(ix[s].tail)}
		}
	}
	j.head = 0
	return true
}

// expire drops the tuples at the front that no tuple to come can match.
func (j *Join) expire() {
	cut := j.Watermark() - j.cfg.Within
	for j.n > 0 && j.ring[j.head].ts < cut {
		j.evictFront(false, nil, 0)
	}
}

// evictFront removes the oldest tuple. early means for max_state, before it
// expired; ix, for key hash h, is a copy of the index entry the caller
// holds, updated in place instead of the map.
func (j *Join) evictFront(early bool, ix *keyIndex, h uint64) {
	t := &j.ring[j.head]
	if early {
		j.c.Evicted++
		j.markIncomplete(t.ts)
	} else {
		j.c.Expired++
	}
	s := t.side()
	e := ix
	if t.hash != h || ix == nil {
		v := j.index[t.hash]
		e = &v
	}
	e[s].head = t.next
	if t.next < 0 {
		e[s].tail = -1
	}
	if e != ix {
		if e[0].head < 0 && e[1].head < 0 {
			delete(j.index, t.hash)
		} else {
			j.index[t.hash] = *e
		}
	}
	j.head = (j.head + 1) % len(j.ring)
	j.n--
	j.frontAbs++
	j.div++
}

// markIncomplete flags the windows an evicted tuple at ts could have had
// matches in.
func (j *Join) markIncomplete(ts int64) {
	for _, a := range j.wins {
		if j.cfg.Window == 0 || a.Start <= ts+j.cfg.Within && ts < a.End {
			a.Evicted++
		}
	}
}

func (j *Join) absOf(i int) uint64 {
	return j.frontAbs + uint64((i-j.head+len(j.ring))%len(j.ring))
}

func (j *Join) windowOf(ts int64) int64 {
	q := ts / j.cfg.Window
	if ts%j.cfg.Window != 0 && ts < 0 {
		q--
	}
	return q
}

// window returns the open window idx, opening it (and closing those the
// watermark passed) if needed.
func (j *Join) window(idx int64) *Acc {
	start := idx * j.cfg.Window
	for i := len(j.wins) - 1; i >= 0; i-- {
		if a := j.wins[i]; a.Start == start {
			return a
		} else if a.Start < start {
			a := &Acc{Start: start, End: start + j.cfg.Window}
			j.wins = append(j.wins[:i+1], append([]*Acc{a}, j.wins[i+1:]...)...)
			j.closeWindows()
			return a
		}
	}
	a := &Acc{Start: start, End: start + j.cfg.Window}
	j.wins = append([]*Acc{a}, j.wins...)
	j.closeWindows()
	return a
}

// closeWindows closes the windows whose matches are all in: a pair's later
// tuple is not late, so at or past the watermark.
func (j *Join) closeWindows() {
	wm := j.Watermark()
	k := 0
	for k < len(j.wins)-1 && j.wins[k].End <= wm {
		k++
	}
	if k == 0 {
		return
	}
	j.closed = append(j.closed, j.wins[:k]...)
	j.wins = append(j.wins[:0], j.wins[k:]...)
	if extra := len(j.closed) - j.cfg.Keep; extra > 0 {
		j.closed = append(j.closed[:0], j.closed[extra:]...)
	}
}

// Widen records that up to lost tuples of this join were lost in a crash
// (the recovered state misses them): every open window's interval widens.
func (j *Join) Widen(lost float64) {
	j.c.Lost += lost
	j.c.Recovers++
	for _, a := range j.wins {
		a.Lost += lost * j.cfg.Sample
	}
}
