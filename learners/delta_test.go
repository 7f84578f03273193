package learners

import "testing"

func TestDeltaMap(t *testing.T) {
	d := newDeltaMap()
	const n = 20000 // grows the table several times
	for s := range n {
		d.reserve(1)
		i := d.insert(s * 7919)
		d.entries[i].da, d.entries[i].db = float64(s), float64(-s)
		if j := d.insert(s * 7919); j != i {
			t.Fatal("second insert of a slot made a new entry")
		}
	}
	if len(d.used) != n || len(d.entries) < 2*n {
		t.Fatalf("used %d, capacity %d", len(d.used), len(d.entries))
	}
	for s := range n {
		if a, b := d.get(s * 7919); a != float64(s) || b != float64(-s) {
			t.Fatalf("slot %d: %v %v", s*7919, a, b)
		}
	}
	if d.find(3) != -1 {
		t.Error("found a slot never inserted")
	}
	d.reset()
	if len(d.used) != 0 || d.find(7919) != -1 {
		t.Error("reset left entries")
	}
	for _, e := range d.entries {
		if e != (deltaEntry{}) {
			t.Fatal("reset left a non-empty entry")
		}
	}
}

// TestSyncEmptiesDelta: Sync and SyncTracked, which merge in prefetched
// chunks, merge every entry and leave the delta empty, with its capacity,
// for the next events.
func TestSyncEmptiesDelta(t *testing.T) {
	feats, labels := wideEvents(500, 100_000)
	for _, tracked := range []bool{false, true} {
		m, _ := NewModel(DefaultConfig())
		l := m.NewLearner()
		for i := range feats {
			l.Learn(feats[i], labels[i])
		}
		capacity := len(l.delta.entries)
		if tracked {
			l.SyncTracked(NewTracker(m))
		} else {
			l.Sync()
		}
		if len(l.delta.used) != 0 || len(l.delta.entries) != capacity || l.delta.find(int(feats[0][0].Hash&m.mask)) != -1 {
			t.Fatalf("tracked %v: after Sync: %d used, capacity %d (was %d)", tracked, len(l.delta.used), len(l.delta.entries), capacity)
		}
		for i, e := range l.delta.entries {
			if e != (deltaEntry{}) {
				t.Fatalf("tracked %v: entry %d not empty after Sync: %+v", tracked, i, e)
			}
		}
		if m.Updates() != uint64(len(feats)) {
			t.Fatalf("tracked %v: %d updates merged, want %d", tracked, m.Updates(), len(feats))
		}
	}
}

// TestManyFeaturesBetweenSyncs: a learner touching more slots than the
// initial delta table holds learns the same as one syncing often, up to
// staleness, and Sync pushes every delta.
func TestManyFeaturesBetweenSyncs(t *testing.T) {
	m, _ := NewModel(Config{HashBits: 16})
	l := m.NewLearner()
	for i := range 10000 {
		l.Learn([]Feature{{uint64(i), 1}, {uint64(i + 30000), 2}}, i%2 == 0)
	}
	before := l.Predict([]Feature{{5, 1}, {30006, 2}})
	l.Sync()
	if after := m.Predict([]Feature{{5, 1}, {30006, 2}}); after != before {
		t.Errorf("global %v after sync, local %v before", after, before)
	}
	if s := m.Snapshot(false, 0); s.NonZero != 20001 {
		t.Errorf("nonzero weights %d, want 20001", s.NonZero)
	}
}
