package lease

import (
	"fmt"
	"maps"
	"testing"
)

func TestAssignBalancesAndSpreadsJobs(t *testing.T) {
	keys := testKeys() // 3 jobs × 4 keys
	for _, nodes := range [][]string{{"a"}, {"a", "b"}, {"a", "b", "c"}, {"a", "b", "c", "d"}, {"a", "b", "c", "d", "e"}} {
		got := Assign(keys, nodes)
		if len(got) != len(keys) {
			t.Fatalf("%v: %d of %d keys assigned", nodes, len(got), len(keys))
		}
		perNode := map[string]int{}
		perJob := map[[2]string]int{}
		for k, n := range got {
			perNode[n]++
			perJob[[2]string{group(k), n}]++
		}
		lo, hi := len(keys)/len(nodes), (len(keys)+len(nodes)-1)/len(nodes)
		for _, n := range nodes {
			if perNode[n] < lo || perNode[n] > hi {
				t.Errorf("%v: node %s has %d keys, want %d..%d", nodes, n, perNode[n], lo, hi)
			}
		}
		jobCap := (4 + len(nodes) - 1) / len(nodes)
		for jn, c := range perJob {
			if c > jobCap {
				t.Errorf("%v: node %s has %d keys of job %s, want at most %d", nodes, jn[1], c, jn[0], jobCap)
			}
		}
		// Every node computes the same answer whatever order it lists in.
		rev := []string{}
		for i := len(nodes) - 1; i >= 0; i-- {
			rev = append(rev, nodes[i])
		}
		if again := Assign(keys, rev); !maps.Equal(got, again) {
			t.Errorf("%v: assignment depends on the order of the node list", nodes)
		}
	}
}

func TestAssignMovesFewKeysOnJoin(t *testing.T) {
	var keys []string
	for j := range 10 {
		for p := range 10 {
			keys = append(keys, fmt.Sprintf("job%d.p%d", j, p))
		}
	}
	before := Assign(keys, []string{"a", "b", "c", "d"})
	after := Assign(keys, []string{"a", "b", "c", "d", "e"})
	moved := 0
	for k := range before {
		if before[k] != after[k] {
			moved++
		}
	}
	// The optimum is 20 (the new node's share); round robin would move ~80.
	if moved > 40 {
		t.Errorf("a fifth node moved %d of 100 keys", moved)
	}
	if testing.Verbose() {
		t.Logf("a fifth node moved %d of 100 keys", moved)
	}
}

func TestAssignFewerKeysThanNodes(t *testing.T) {
	got := Assign([]string{"x.p0", "x.p1"}, []string{"a", "b", "c"})
	if len(got) != 2 || got["x.p0"] == got["x.p1"] {
		t.Errorf("Assign = %v, want two keys on two nodes", got)
	}
	if len(Assign(nil, []string{"a"})) != 0 || len(Assign([]string{"k"}, nil)) != 0 {
		t.Error("Assign with no keys or no nodes should be empty")
	}
}

// Keys go to nodes in proportion to their cores: a node of 4 cores takes
// twice the keys of one of 2, of all keys and of each job; a node that
// does not say its cores makes every node weigh the same.
func TestAssignWeightedByCores(t *testing.T) {
	var keys []string
	for j := range 3 {
		for p := range 8 {
			keys = append(keys, fmt.Sprintf("job%d.p%d", j, p))
		}
	}
	cores := map[string]int{"a": 4, "b": 2, "c": 2}
	got := AssignWeighted(keys, []string{"a", "b", "c"}, func(n string) int { return cores[n] })
	perNode := map[string]int{}
	perJob := map[[2]string]int{}
	for k, n := range got {
		perNode[n]++
		perJob[[2]string{group(k), n}]++
	}
	if perNode["a"] != 12 || perNode["b"] != 6 || perNode["c"] != 6 {
		t.Errorf("keys per node %v, want a 12, b 6, c 6 (cores 4, 2, 2)", perNode)
	}
	for jn, c := range perJob {
		if want := 8 * cores[jn[1]] / 8; c != want {
			t.Errorf("node %s has %d keys of %s, want %d", jn[1], c, jn[0], want)
		}
	}
	cores["c"] = 0 // an older node
	even := AssignWeighted(keys, []string{"a", "b", "c"}, func(n string) int { return cores[n] })
	if !maps.Equal(even, Assign(keys, []string{"a", "b", "c"})) {
		t.Error("with a node that does not say its cores, the assignment is not the even one")
	}
}
