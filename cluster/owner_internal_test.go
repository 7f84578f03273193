package cluster

import (
	"math/rand/v2"
	"testing"
)

// A partition's events come from log messages of several events each; a
// backup at any event says where to resume (message and events to skip)
// so that a new owner replaying from there sees exactly the events after
// it, none twice and none missing: checked against a simulated log, over
// backups at random events, mid-message ones included.
func TestRingResumesAfterExactlyTheBackedUpEvents(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type msg struct {
		seq uint64
		n   int
	}
	var log []msg
	for seq := uint64(1); seq <= 300; seq++ {
		if rng.IntN(3) == 0 {
			continue // another partition's message in the same stream
		}
		log = append(log, msg{seq, 1 + rng.IntN(7)})
	}
	var r posRing
	r.reset(position{})
	var events []uint64 // event seq → message seq, for checking
	events = append(events, 0)
	for _, m := range log {
		r.add(m.n, m.seq)
		for range m.n {
			events = append(events, m.seq)
		}
		if rng.IntN(4) != 0 {
			continue
		}
		// A backup holding the events up to a random one delivered so far
		// and not before the last backup.
		base := r.basePosition().rec
		rec := base + uint64(rng.IntN(int(uint64(len(events)-1)-base)+1))
		resume, skip, ok := r.position(rec)
		if !ok {
			t.Fatalf("rec %d (base %d) unknown", rec, base)
		}
		// Replay: every event of the messages from resume on, skipping
		// skip events of the first, must be exactly rec+1, rec+2, ...
		next := rec + 1
		first := true
		for _, m := range log {
			if m.seq < resume {
				continue
			}
			k := 0
			if first {
				k = skip
				first = false
			}
			for e := k; e < m.n; e++ {
				if next >= uint64(len(events)) {
					break
				}
				if events[next] != m.seq {
					t.Fatalf("backup at event %d: resume %d skip %d replays message %d where event %d came from %d",
						rec, resume, skip, m.seq, next, events[next])
				}
				next++
			}
		}
		if next != uint64(len(events)) {
			t.Fatalf("backup at event %d: replay ended at %d of %d", rec, next, len(events)-1)
		}
		r.backedUp(rec, resume, skip)
	}
}
