package cluster

import (
	"time"
)

// strangerGrace is how long a server routed into the cluster may go
// without being an mlstream node (a heartbeat and a membership lease)
// before it is reported: a node that restarts routes before it joins.
const strangerGrace = 30 * time.Second

// strangers notices NATS servers routed into the cluster that are not
// mlstream nodes: a server started with the cluster's credentials by
// someone else, or a node that failed to start. Routes are authenticated,
// so this is the last line, and it only logs.
type strangers struct {
	since    map[string]time.Time // routed and not a node, since
	reported map[string]bool
}

func newStrangers() *strangers {
	return &strangers{since: map[string]time.Time{}, reported: map[string]bool{}}
}

// check takes the servers routed now and the nodes, and returns the
// servers to report now: routed for strangerGrace without being a node,
// each once while it stays.
func (s *strangers) check(now time.Time, routed []string, nodes map[string]bool) []string {
	var out []string
	present := make(map[string]bool, len(routed))
	for _, name := range routed {
		present[name] = true
		if nodes[name] {
			delete(s.since, name)
			delete(s.reported, name)
			continue
		}
		first, ok := s.since[name]
		if !ok {
			s.since[name] = now
			continue
		}
		if !s.reported[name] && now.Sub(first) >= strangerGrace {
			s.reported[name] = true
			out = append(out, name)
		}
	}
	for name := range s.since {
		if !present[name] {
			delete(s.since, name)
			delete(s.reported, name)
		}
	}
	return out
}

// watchStrangers logs, every few seconds, the servers that check reports.
func (n *Node) watchStrangers() {
	s := newStrangers()
	every(n.ctx, 5*time.Second, func() {
		nodes := map[string]bool{}
		for _, ni := range n.leases.Nodes() {
			nodes[ni.Name] = true
		}
		for _, name := range s.check(time.Now(), n.cfg.NATS.Routed(), nodes) {
			n.log.Error("a NATS server is routed into the cluster but is not an mlstream node: someone started a server with the cluster's credentials, or a node failed to start; rotate --cluster-secret (or the route certificates) if it is not yours",
				"server", name, "for", strangerGrace.String())
		}
	})
}
