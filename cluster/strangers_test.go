package cluster

import (
	"slices"
	"testing"
	"time"
)

// A server routed into the cluster that is no mlstream node is reported
// once after strangerGrace; a node, or a server that joins as a node in
// time, never is; one that leaves and comes back is reported again.
func TestStrangersReportedOnce(t *testing.T) {
	s := newStrangers()
	t0 := time.Now()
	nodes := map[string]bool{"n1": true, "n2": true}
	routed := []string{"n1", "n2", "rogue", "n3"}
	if got := s.check(t0, routed, nodes); len(got) != 0 {
		t.Fatalf("reported at first sight: %v", got)
	}
	nodes["n3"] = true // n3 joined as a node
	if got := s.check(t0.Add(strangerGrace), routed, nodes); !slices.Equal(got, []string{"rogue"}) {
		t.Fatalf("reported %v after the grace, want [rogue]", got)
	}
	if got := s.check(t0.Add(2*strangerGrace), routed, nodes); len(got) != 0 {
		t.Fatalf("reported again while it stayed: %v", got)
	}
	s.check(t0.Add(3*strangerGrace), []string{"n1", "n2", "n3"}, nodes)
	s.check(t0.Add(4*strangerGrace), routed, nodes)
	if got := s.check(t0.Add(5*strangerGrace), routed, nodes); !slices.Equal(got, []string{"rogue"}) {
		t.Fatalf("back after it left: reported %v, want [rogue]", got)
	}
}
