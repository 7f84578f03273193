package logreg

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/mlstream/mlstream/learners"
	"github.com/valyala/fastjson"
)

// The dictionary from hashed slot to the feature names seen there, for
// reading weights by name (GET .../model?top=N). Its memory is bounded:
// at most names_slots slots, at most namesPerSlot names per slot kept by
// Space-Saving (a new name replaces the rarest and inherits its count, so
// a count overestimates by at most the count it inherited), names cut to
// maxNameBytes. It reads one event in namesEvery, so ingest pays for it
// only there; counts are of sampled events.
const (
	namesPerSlot     = 4
	maxNameBytes     = 48
	namesEvery       = 16
	DefaultNameSlots = 1 << 12
	maxNameSlots     = 1 << 22
	// nameSlotBytes is one tracked slot: its map entry, its names and
	// their bytes at their longest.
	nameSlotBytes = 48 + namesPerSlot*(16+8) + namesPerSlot*maxNameBytes
)

// NameCount is a feature name and how many sampled events had it.
type NameCount struct {
	Name  string `json:"name"`
	Count uint64 `json:"count"`
}

type slotNames [namesPerSlot]NameCount

type nameDict struct {
	limit  int // slots tracked at most; 0: no dictionary
	events atomic.Uint64
	mu     sync.Mutex
	slots  map[int]*slotNames
	// untracked counts names not recorded because limit slots were
	// tracked already: visible in the top answer.
	untracked uint64
	// changed are the slots whose names changed since the last backup,
	// for delta backups: at most limit of them.
	changed map[int]struct{}
	// buf and ends hold a sampled event's names (guarded by mu), so that
	// sampling allocates only for a name the dictionary keeps.
	buf  []byte
	ends []int
}

func newNameDict(limit int) *nameDict {
	return &nameDict{limit: limit, slots: map[int]*slotNames{}, changed: map[int]struct{}{}}
}

// sample says whether this event's names are to be observed: one event in
// namesEvery, none without a dictionary. Asked first, so that the other
// events do not look their features field up a second time.
func (d *nameDict) sample() bool { return d.limit != 0 && sampled(d.events.Add(1)) }

// observe records the names of one sampled event's features. f is the
// event's features field, feats what the engine hashed from it.
func (d *nameDict) observe(f *fastjson.Value, feats []learners.Feature, m *learners.Model) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.buf, d.ends = appendFeatureNames(d.buf[:0], d.ends[:0], f)
	d.count(feats, m)
}

// observeRaw is observe of the event ev, which the fast path took
// (fastpath.go), whose features field is field.
func (d *nameDict) observeRaw(ev []byte, field string, feats []learners.Feature, m *learners.Model) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.buf, d.ends = appendRawFeatureNames(d.buf[:0], d.ends[:0], ev, field)
	d.count(feats, m)
}

// count counts the names in d.buf (ends) at the slots of feats, the
// features hashed from them; d.mu held.
func (d *nameDict) count(feats []learners.Feature, m *learners.Model) {
	if len(d.ends) != len(feats) {
		return
	}
	start := 0
	for i, ft := range feats {
		d.addBytes(m.Slot(ft.Hash), d.buf[start:d.ends[i]], 1)
		start = d.ends[i]
	}
}

// sampled picks about one event in namesEvery by a mixed
// counter, so that a stream with a period (alternating classes, say) is
// not sampled in step with it.
func sampled(n uint64) bool {
	n *= 0x9e3779b97f4a7c15 // Fibonacci hashing
	n ^= n >> 29
	return (n>>32)%namesEvery == 0
}

// add counts name at slot; d.mu held.
func (d *nameDict) add(slot int, name string, n uint64) { d.addBytes(slot, []byte(name), n) }

// addBytes is add of a name in bytes: it makes a string only of a name the
// slot keeps.
func (d *nameDict) addBytes(slot int, name []byte, n uint64) {
	if len(name) > maxNameBytes {
		name = name[:maxNameBytes]
	}
	s := d.slots[slot]
	if s == nil {
		if len(d.slots) >= d.limit {
			d.untracked += n
			return
		}
		s = new(slotNames)
		d.slots[slot] = s
	}
	d.changed[slot] = struct{}{}
	rarest := 0
	for i := range s {
		switch {
		case s[i].Name == string(name) && s[i].Count > 0:
			s[i].Count += n
			return
		case s[i].Count < s[rarest].Count:
			rarest = i
		}
	}
	s[rarest] = NameCount{Name: string(name), Count: s[rarest].Count + n}
}

// names returns the names seen at slot, the most frequent first.
func (d *nameDict) names(slot int) []NameCount {
	d.mu.Lock()
	defer d.mu.Unlock()
	return sortedNames(d.slots[slot])
}

func sortedNames(s *slotNames) []NameCount {
	if s == nil {
		return nil
	}
	var out []NameCount
	for _, nc := range s {
		if nc.Count > 0 {
			out = append(out, nc)
		}
	}
	slices.SortFunc(out, func(a, b NameCount) int { return cmp.Compare(b.Count, a.Count) })
	return out
}

// namesJSON is the names section of an export.
type namesJSON struct {
	Every int                 `json:"every"`
	Slots map[int][]NameCount `json:"slots"`
}

func (d *nameDict) marshal() ([]byte, error) {
	d.mu.Lock()
	out := namesJSON{Every: namesEvery, Slots: make(map[int][]NameCount, len(d.slots))}
	for slot, s := range d.slots {
		out.Slots[slot] = sortedNames(s)
	}
	d.mu.Unlock()
	return json.Marshal(out)
}

// load reads an export's names section into a new dictionary of d's
// limit, refusing slots past nslots.
func (d *nameDict) load(data []byte, nslots int) (*nameDict, error) {
	fresh := newNameDict(d.limit)
	if len(data) == 0 || d.limit == 0 {
		return fresh, nil
	}
	var in namesJSON
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, formatError("names: %v", err)
	}
	for slot, ns := range in.Slots {
		if slot < 0 || slot >= nslots {
			return nil, formatError("names: slot %d out of range", slot)
		}
		for _, nc := range ns {
			fresh.add(slot, nc.Name, nc.Count)
		}
	}
	return fresh, nil
}

// install replaces d's names with those of fresh.
func (d *nameDict) install(fresh *nameDict) {
	d.mu.Lock()
	d.slots, d.untracked = fresh.slots, fresh.untracked
	d.mu.Unlock()
}

// namesBackup is the dictionary in a backup (ft.go): every slot in a full
// one, the slots that changed since the backup before in a delta.
type namesBackup struct {
	Slots     map[int][]NameCount `json:"slots"`
	Untracked uint64              `json:"untracked"`
}

// backup encodes the dictionary for a backup, all of it or what changed
// since the last backup, and starts tracking changes anew.
func (d *nameDict) backup(full bool) ([]byte, error) {
	d.mu.Lock()
	out := namesBackup{Slots: make(map[int][]NameCount), Untracked: d.untracked}
	if full {
		for slot, s := range d.slots {
			out.Slots[slot] = sortedNames(s)
		}
	} else {
		for slot := range d.changed {
			out.Slots[slot] = sortedNames(d.slots[slot])
		}
	}
	clear(d.changed)
	d.mu.Unlock()
	return json.Marshal(out)
}

// restore applies what backup wrote: a full backup replaces the names, a
// delta replaces the slots it holds. Slots past nslots, more than the
// dictionary's limit of slots or namesPerSlot names in one are refused.
func (d *nameDict) restore(data []byte, nslots int, full bool) error {
	if d.limit == 0 {
		return nil // the job keeps no names
	}
	var in namesBackup
	if err := json.Unmarshal(data, &in); err != nil {
		return fmt.Errorf("logreg state: names: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if full {
		d.slots = map[int]*slotNames{}
	}
	d.untracked = in.Untracked
	for slot, ns := range in.Slots {
		if slot < 0 || slot >= nslots || len(ns) > namesPerSlot {
			return fmt.Errorf("logreg state: names: slot %d of %d names (slots %d, names per slot %d)", slot, len(ns), nslots, namesPerSlot)
		}
		if _, ok := d.slots[slot]; !ok && len(d.slots) >= d.limit {
			return fmt.Errorf("logreg state: names: more than %d slots", d.limit)
		}
		s := new(slotNames)
		for i, nc := range ns {
			if len(nc.Name) > maxNameBytes {
				nc.Name = nc.Name[:maxNameBytes]
			}
			s[i] = nc
		}
		d.slots[slot] = s
	}
	return nil
}
