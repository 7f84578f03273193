package lease

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// movedKeys lists the keys whose owner differs between two ownerships.
func movedKeys(before, after map[string]map[string]uint64, keys []string) map[string][2]string {
	out := make(map[string][2]string)
	for _, k := range keys {
		from, _ := ownerOf(before, k)
		to, _ := ownerOf(after, k)
		if from != to {
			out[k] = [2]string{from, to}
		}
	}
	return out
}

// checkGraceful: for every moved key the old owner's Release came before
// the new owner's Acquired of it. Only the events from index from on count;
// Acquired runs on its own goroutine, so it may come after Owned shows it.
func checkGraceful(t *testing.T, j *journal, from int, moved map[string][2]string) {
	t.Helper()
	var events []event
	eventually(t, 5*time.Second, "the Acquired calls of the moved keys", func() bool {
		events = j.snapshot()[from:]
		for k, ft := range moved {
			if firstIndex(events, ft[1], "acquired", k) < 0 {
				return false
			}
		}
		return true
	})
	for k, ft := range moved {
		rel := firstIndex(events, ft[0], "release", k)
		acq := firstIndex(events, ft[1], "acquired", k)
		if rel < 0 || rel > acq {
			t.Errorf("key %s moved %s → %s: Release at %d, Acquired at %d (want Release first)", k, ft[0], ft[1], rel, acq)
		}
	}
}

func checkNoLost(t *testing.T, j *journal, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		if c := j.count(n, "lost"); c != 0 {
			t.Errorf("Lost called %d times on %s", c, n)
		}
		if c := j.count(n, "release-not-owned"); c != 0 {
			t.Errorf("Release called %d times on %s for keys Owned did not list", c, n)
		}
	}
}

func TestJoinCloseAndCrashMoveKeys(t *testing.T) {
	c := newTestCluster(t, testKeys())
	c.start("a", "b", "c")
	three := c.waitBalanced(10*time.Second, 4)

	mark := len(c.j.snapshot())
	c.add("d")
	four := c.waitBalanced(10*time.Second, 3)
	moved := movedKeys(three, four, c.currentKeys())
	if len(moved) < 3 {
		t.Errorf("only %d keys moved to the new node", len(moved))
	}
	checkGraceful(t, c.j, mark, moved)
	checkNoLost(t, c.j, "a", "b", "c", "d")

	// Graceful leave: b's keys go to the others through Release.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mark = len(c.j.snapshot())
	if err := c.managers()["b"].Close(ctx); err != nil {
		t.Fatal(err)
	}
	c.remove("b")
	for k := range four["b"] {
		if firstIndex(c.j.snapshot()[mark:], "b", "release", k) < 0 {
			t.Errorf("Close did not release %s", k)
		}
	}
	three = c.waitBalanced(10*time.Second, 4)
	moved = movedKeys(four, three, c.currentKeys())
	for k := range four["b"] {
		if _, ok := moved[k]; !ok {
			t.Errorf("key %s of b did not move", k)
		}
	}
	checkGraceful(t, c.j, mark, moved)
	eventually(t, 5*time.Second, "b gone from the node list", func() bool {
		return len(c.managers()["a"].Nodes()) == 3
	})

	// Crash: c stops renewing; its keys expire and go to a and d.
	crashed := three["c"]
	crashedAt := time.Now()
	c.managers()["c"].Abort()
	c.remove("c")
	two := c.waitBalanced(20*testTTL, 6)
	t.Logf("a crashed node's keys moved in %v (TTL %v)", time.Since(crashedAt), testTTL)
	for k, oldTok := range crashed {
		n, tok := ownerOf(two, k)
		if tok <= oldTok {
			t.Errorf("key %s: new owner %s has token %d, not above the crashed owner's %d", k, n, tok, oldTok)
		}
	}
	checkNoLost(t, c.j, "a", "d")
}

func TestPausedNodeLosesKeysAndNeverOverlaps(t *testing.T) {
	c := newTestCluster(t, testKeys())
	c.start("a", "b", "c")
	before := c.waitBalanced(10*time.Second, 4)

	paused := c.managers()["c"]
	paused.pause()
	// c's keys are taken by a and b once its leases expire; meanwhile c
	// stops listing them in Owned (the overlap watcher checks every ms).
	others := map[string]*Manager{"a": c.managers()["a"], "b": c.managers()["b"]}
	eventually(t, 20*testTTL, "a and b to own every key", func() bool {
		_, ok := ownership(others, c.currentKeys())
		return ok
	})
	if got := paused.Owned(); len(got) != 0 {
		t.Errorf("paused node still lists %v as owned after others took them", got)
	}
	if n := c.j.count("c", "lost"); n != 0 {
		t.Errorf("a paused node got %d Lost calls while paused", n)
	}

	paused.resume()
	eventually(t, 10*time.Second, "Lost for every key of the paused node", func() bool {
		for k := range before["c"] {
			if firstIndex(c.j.snapshot(), "c", "lost", k) < 0 {
				return false
			}
		}
		return true
	})
	checkNoLost(t, c.j, "a", "b")
	// c is live again: it gets its share back gracefully.
	c.waitBalanced(10*time.Second, 4)
	for k := range before["c"] {
		if firstIndex(c.j.snapshot(), "c", "release", k) >= 0 {
			t.Errorf("Release called on the paused node for %s, which it lost", k)
		}
	}
}

func TestSetKeysRemovingKeysReleasesThem(t *testing.T) {
	c := newTestCluster(t, testKeys())
	c.start("a", "b")
	before := c.waitBalanced(10*time.Second, 6)

	var kept, removed []string
	for _, k := range c.currentKeys() {
		if k[0] == 'c' { // clicks.*
			removed = append(removed, k)
		} else {
			kept = append(kept, k)
		}
	}
	c.setKeys(kept)
	c.waitBalanced(10*time.Second, 4)
	for _, k := range removed {
		n, _ := ownerOf(before, k)
		if firstIndex(c.j.snapshot(), n, "release", k) < 0 {
			t.Errorf("removed key %s was not released by its owner %s", k, n)
		}
	}
	eventually(t, 5*time.Second, "the removed keys' leases deleted", func() bool {
		for _, m := range c.managers() {
			for _, k := range removed {
				if _, ok := m.Owners()[k]; ok {
					return false
				}
			}
		}
		return true
	})
	checkNoLost(t, c.j, "a", "b")
}

// While the nodes bucket is unavailable (its leader died and a new one is
// being elected), no node can tell who is alive: each keeps the membership
// it knew, and nobody hands keys around. Once the bucket is back, nothing
// moved.
func TestNodesBucketOutageMovesNothing(t *testing.T) {
	c := newTestCluster(t, testKeys())
	c.start("a", "b", "c")
	before := c.waitBalanced(10*time.Second, 4)
	from := len(c.j.snapshot())

	js := c.connect()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteKeyValue(ctx, NodesBucket); err != nil {
		t.Fatal(err)
	}
	// Every heartbeat fails for several TTLs; the nodes' views of each
	// other grow old meanwhile.
	outage := time.Now()
	eventually(t, 20*testTTL, "several TTLs without heartbeats", func() bool {
		return time.Since(outage) > 5*testTTL
	})
	for name, m := range c.managers() {
		if n := len(m.Nodes()); n != 3 {
			t.Errorf("node %s sees %d nodes during the outage, want the 3 it knew", name, n)
		}
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: NodesBucket, TTL: testTTL}); err != nil {
		t.Fatal(err)
	}
	after := c.waitBalanced(10*time.Second, 4)
	if moved := movedKeys(before, after, c.currentKeys()); len(moved) != 0 {
		t.Errorf("keys moved through the outage: %v", moved)
	}
	for _, e := range c.j.snapshot()[from:] {
		if e.kind == "release" || e.kind == "lost" || e.kind == "acquired" {
			t.Errorf("%s: %s %s during the outage", e.node, e.kind, e.key)
		}
	}
}
