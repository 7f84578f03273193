package cluster

import (
	"math/rand/v2"
	"testing"
)

// A partition's events come from log messages of several events each; a
// backup at any event says where to resume (the message, and how many of
// its events the state holds). Owners come and go: each new one restores
// a backup and replays the log from its position, itself resuming inside
// messages. Whatever the crashes, the events the final state holds are
// every event of the log once, in order (checked by message and index).
func TestRingResumesAfterExactlyTheBackedUpEvents(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type msg struct {
		seq uint64
		n   int
	}
	var log []msg
	for seq := uint64(1); seq <= 3000; seq++ {
		if rng.IntN(3) == 0 {
			continue // another partition's message in the same stream
		}
		log = append(log, msg{seq, 1 + rng.IntN(7)})
	}
	type event struct {
		seq uint64 // message
		i   int    // index in it
	}
	var state []event // what the partition's state holds, by event number-1
	type backup struct {
		pos   position
		state []event
	}
	last := backup{}
	var r posRing
	r.reset(last.pos)
	for crashes := 0; ; crashes++ {
		// Replay from the backup's position: messages from resume on,
		// skipping skip events of the first.
		state = append([]event(nil), last.state...)
		crashed := false
		first := true
		for _, m := range log {
			if m.seq < last.pos.resume {
				continue
			}
			skip := 0
			if first {
				skip, first = last.pos.skip, false
			}
			if skip >= m.n {
				continue
			}
			r.add(m.n-skip, m.seq, skip)
			for i := skip; i < m.n; i++ {
				state = append(state, event{m.seq, i})
				if rng.IntN(5) == 0 { // a backup after this event
					rec := uint64(len(state))
					resume, sk, ok := r.position(rec)
					if !ok {
						t.Fatalf("event %d unknown to the ring", rec)
					}
					r.backedUp(rec, resume, sk)
					last = backup{position{rec: rec, resume: resume, skip: sk}, append([]event(nil), state...)}
				}
				if crashes < 500 && rng.IntN(20) == 0 { // a crash: the next owner restores last
					crashed = true
					break
				}
			}
			if crashed {
				break
			}
		}
		if !crashed {
			break
		}
		r.reset(last.pos)
	}
	k := 0
	for _, m := range log {
		for i := range m.n {
			if k >= len(state) || state[k] != (event{m.seq, i}) {
				t.Fatalf("event %d: have %+v, want message %d index %d", k+1, state[min(k, len(state)-1)], m.seq, i)
			}
			k++
		}
	}
	if k != len(state) {
		t.Fatalf("%d events in the state, the log has %d", len(state), k)
	}
}

func TestConsumerNamesParse(t *testing.T) {
	ps := &partState{p: 3}
	for _, tc := range []struct {
		name    string
		token   uint64
		attempt int
		ok      bool
	}{
		{consumerPrefix(3) + "42-7", 42, 7, true},
		{"p3-t42-7", 42, 7, true},
		{"p31-t42-7", 0, 0, false}, // partition 31's
		{"p3-t42", 0, 0, false},
		{"p3-tx-1", 0, 0, false},
		{"mls-src-job", 0, 0, false},
	} {
		tok, att, ok := ps.consumerOf(tc.name)
		if ok != tc.ok || ok && (tok != tc.token || att != tc.attempt) {
			t.Errorf("%s: got (%d, %d, %v), want (%d, %d, %v)", tc.name, tok, att, ok, tc.token, tc.attempt, tc.ok)
		}
	}
}
