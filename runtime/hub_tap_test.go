package runtime

import (
	"sync"
	"testing"
	"time"
)

// partTap records the partition of every message the hub hands it and
// keeps those of partition veto from the hub's subscribers.
type partTap struct {
	veto int
	mu   sync.Mutex
	seen map[int]int // by partition
}

func (t *partTap) Forward(job, typ string, part int, msg []byte) bool {
	t.mu.Lock()
	t.seen[part]++
	t.mu.Unlock()
	return part != t.veto
}

func (t *partTap) RemoteWants(job, typ string) bool { return false }

func (t *partTap) count(part int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seen[part]
}

// A job's partitions publish through emitters that know their partition:
// the tap sees it on each output, and an output it vetoes reaches no
// subscriber; a job-level message comes with partition -1.
func TestHubTapSeesPartitions(t *testing.T) {
	e := testEngine(t, Config{})
	tap := &partTap{veto: 1, seen: map[int]int{}}
	e.Hub().SetTap(tap)
	j := mustPut(t, e, joinSpec(map[string]any{"value": "price"}))
	sub := e.Hub().Subscribe([]string{"j"}, []string{TypeMatch}, 100_000)
	defer e.Hub().Unsubscribe(sub)
	evs, truth := joinEvents(2, 2000, 30, 5, 50)
	ingestBoth(t, e, evs)
	waitIdle(t, j)
	deadline := time.Now().Add(10 * time.Second)
	for tap.count(0)+tap.count(1) < truth && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	p0, p1 := tap.count(0), tap.count(1)
	if p0 == 0 || p1 == 0 || p0+p1 != truth {
		t.Fatalf("tap saw %d matches of partition 0 and %d of partition 1, want both > 0 and %d in all", p0, p1, truth)
	}
	// The subscriber is offered each message just after the tap saw it.
	for len(sub.C) < p0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if len(sub.C) != p0 {
		t.Fatalf("subscriber got %d matches, want the %d of partition 0 (partition 1's vetoed)", len(sub.C), p0)
	}
	// (The engine's own job-level messages may come meanwhile.)
	before := tap.count(-1)
	e.Hub().Publish("j", TypeStats, []byte("{}"))
	if tap.count(-1) <= before {
		t.Fatal("a job-level message did not reach the tap as partition -1")
	}
}

// An emitter's partition is its index; the zero Emitter is job-level.
func TestEmitterPartition(t *testing.T) {
	h := NewHub()
	if p := (Emitter{hub: h, job: "j"}).Partition(); p != -1 {
		t.Fatalf("job-level emitter's partition %d, want -1", p)
	}
	if p := (Emitter{hub: h, job: "j", slot: 3}).Partition(); p != 2 {
		t.Fatalf("partition %d, want 2", p)
	}
}
