package natsnode

import (
	"sync"
	"time"
	_ "unsafe" // go:linkname: the election timeouts are variables of nats-server, not options

	_ "github.com/nats-io/nats-server/v2/server"
)

// The Raft election timeouts of the embedded nats-server. A follower that
// hears nothing from its leader for a random time in [min, max) campaigns
// to replace it; nats-server's defaults (4–9 s) are made for WANs, and
// after a node dies every stream, bucket and consumer it led waits that
// long before anything can be written to it. They are package variables
// of nats-server (its tests change them), not options, hence linkname.
// The heartbeat stays nats-server's (1 s): a leader must be silent for
// more than two of them before anyone campaigns.
//
//go:linkname raftMinElection github.com/nats-io/nats-server/v2/server.minElectionTimeout
var raftMinElection time.Duration

//go:linkname raftMaxElection github.com/nats-io/nats-server/v2/server.maxElectionTimeout
var raftMaxElection time.Duration

const (
	// DefaultElection is Config.Election's default.
	DefaultElection = 2 * time.Second
	// minElection keeps two heartbeats (1 s apart) within the shortest wait.
	minElection = 2 * time.Second
)

var electionMu sync.Mutex

// setElection makes the process's Raft election timeouts [lo, 2·lo).
// They are process-wide: every embedded server of the process reads them
// (without a lock), so they are written only when they change, which is
// before the first server starts (one per mlstream process; tests that
// run several in one process give them all the same).
func setElection(lo time.Duration) {
	electionMu.Lock()
	defer electionMu.Unlock()
	if raftMinElection != lo || raftMaxElection != 2*lo {
		raftMinElection, raftMaxElection = lo, 2*lo
	}
}

// Election returns the process's Raft election timeouts.
func Election() (lo, hi time.Duration) {
	electionMu.Lock()
	defer electionMu.Unlock()
	return raftMinElection, raftMaxElection
}
