package lease

import (
	"context"
	"testing"
	"time"
)

// Heartbeats without a membership lease behind them (a forged node that
// claims all the cores there are), a record that does not decode and one
// that names another node take no key and are no node: while they are
// written, for three TTLs, nothing moves.
func TestForgedHeartbeatsTakeNoKeys(t *testing.T) {
	c := newTestCluster(t, testKeys())
	c.start("a", "b")
	c.waitBalanced(10*time.Second, 6)
	before := len(c.j.snapshot())
	kv, err := c.connect().KeyValue(context.Background(), NodesBucket)
	if err != nil {
		t.Fatal(err)
	}
	forged := map[string]string{
		"ghost": `{"node":"ghost","addr":"http://ghost","cores":4096}`,
		"junk":  `not a heartbeat`,
		"liar":  `{"node":"a","addr":"http://liar","cores":2}`,
	}
	forge := func() {
		for k, v := range forged {
			if _, err := kv.Put(context.Background(), k, []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
	}
	forge()
	eventually(t, 5*time.Second, "every node to see the forged records", func() bool {
		for _, m := range c.managers() {
			m.mu.Lock()
			n := len(m.nodes.m)
			m.mu.Unlock()
			if n != 2+len(forged) {
				return false
			}
		}
		return true
	})
	tick := time.NewTicker(testTTL / 3)
	defer tick.Stop()
	for end := time.Now().Add(3 * testTTL); time.Now().Before(end); <-tick.C {
		forge() // as a forger would, before the bucket's TTL removes them
		if events := c.j.snapshot(); len(events) != before {
			t.Fatalf("keys moved after forged heartbeats: %+v", events[before:])
		}
		for name, m := range c.managers() {
			if nodes := m.Nodes(); len(nodes) != 2 {
				t.Fatalf("%s counts %d nodes: %+v", name, len(nodes), nodes)
			}
		}
	}
}

// A lease record that does not decode does not keep its key from its
// desired owner, which deletes it and takes the key, even while the record
// is written again and again (it would never expire).
func TestUndecodableLeaseIsSkipped(t *testing.T) {
	c := newTestCluster(t, []string{"j.p0"})
	kv := c.bucketReader()
	garbage := func() {
		if _, err := kv.Put(context.Background(), "j.p0", []byte("garbage")); err != nil {
			t.Fatal(err)
		}
	}
	garbage()
	c.start("a")
	tick := time.NewTicker(testTTL / 10)
	defer tick.Stop()
	for deadline := time.Now().Add(5 * time.Second); ; <-tick.C {
		if c.j.count("a", "acquired") > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a never took j.p0 from the undecodable record")
		}
		garbage()
	}
}
