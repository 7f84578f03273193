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
