package lease

import (
	"context"
	"testing"
	"time"
)

func TestLeaseOverwrittenByAnotherHolderIsLost(t *testing.T) {
	c := newTestCluster(t, []string{"solo.p0"})
	c.start("a")
	own := c.waitBalanced(10*time.Second, 1)
	m := c.managers()["a"]

	// Someone else writes the lease (a split-brain writer, an operator).
	rev, err := m.leasesKV.Put(context.Background(), "solo.p0", []byte(`{"node":"intruder","token":0}`))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "Lost on a", func() bool { return c.j.count("a", "lost") == 1 })
	if got := m.Owned(); len(got) != 0 {
		t.Errorf("Owned after the lease was taken = %v", got)
	}
	if o := m.Owners()["solo.p0"]; o.Node != "intruder" || o.Token != rev {
		t.Errorf("Owners()[solo.p0] = %+v, want intruder with token %d", o, rev)
	}
	// The intruder does not renew: after the TTL a takes the key back, with
	// a token above both earlier ones.
	again := c.waitBalanced(20*testTTL, 1)
	if tok := again["a"]["solo.p0"]; tok <= rev || tok <= own["a"]["solo.p0"] {
		t.Errorf("token after retaking = %d, want above %d", tok, rev)
	}
}

func TestRestartedNodeReclaimsItsLeftoverLeases(t *testing.T) {
	c := newTestCluster(t, testKeys())
	c.start("a", "b")
	before := c.waitBalanced(10*time.Second, 6)

	// b crashes and comes back under the same name before its leases
	// expire: it must not wait for them, nor reuse their tokens.
	c.managers()["b"].Abort()
	c.remove("b")
	c.add("b")
	after := c.waitBalanced(20*testTTL, 6)
	for k, old := range before["b"] {
		if n, tok := ownerOf(after, k); n == "b" && tok <= old {
			t.Errorf("key %s: restarted b has token %d, not above its old %d", k, tok, old)
		}
	}
	checkNoLost(t, c.j, "a")
}

func TestNodeWithAnotherTTLFollowsTheBuckets(t *testing.T) {
	c := newTestCluster(t, []string{"x.p0", "x.p1"})
	c.start("a")
	m := c.addWithTTL("b", 10*testTTL)
	if m.TTL() != testTTL {
		t.Errorf("TTL() = %v, want the buckets' %v", m.TTL(), testTTL)
	}
	c.waitBalanced(10*time.Second, 1)
	// b renews at the buckets' pace: it keeps its key past several TTLs.
	key := ""
	for k := range m.Owned() {
		key = k
	}
	start := validUntil(m, key)
	eventually(t, 10*time.Second, "b renewing for 3 TTLs", func() bool {
		return validUntil(m, key).Sub(start) > 3*testTTL
	})
	checkNoLost(t, c.j, "a", "b")
}
