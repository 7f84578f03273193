package runtime

import (
	"sync"
	"time"
)

// Consistency rounds, for kinds that merge partitions into a global state
// (Kind.Consistent; model averaging, after AF-Stream's §5), with Drizzle's
// groups as the rounds. Every partition merges its updates into the global
// model at the end of each of its groups: one round. Under async a
// partition never waits: it learns on the global model as it is, which
// already holds whatever other partitions merged. Under bsp it waits after
// each round until every busy partition has merged the same round, so the
// next round starts from a global model holding all of them; under ssp it
// may run up to staleness rounds ahead of the slowest busy partition.
// Merges add increments to the global weights (the parameter server's
// sum), so a late merge adds to the model and never overwrites a newer
// one; each merge raises the model's version.
//
// A partition whose queue ran dry is idle: nobody waits for it, and when
// it gets work again it joins the round of the fastest, so an idle
// partition never holds the others back.
//
// In cluster mode the clock also holds the partitions other nodes run,
// as their deltas report them (Observe): their round and whether they
// are busy, so that the partitions run here wait for them as for their
// own. A remote partition from which nothing came for the clock's silence
// (DefaultRemoteSilence) counts as idle, so that a dead owner holds no one
// back for longer; a partition taken over here joins at the fastest round
// like an idle one.
type SyncClock struct {
	staleness int
	silence   time.Duration
	mu        sync.Mutex
	cond      *sync.Cond
	rounds    []uint64
	active    []bool
	// remote: run by another node (Observe), until it runs here again;
	// heard is when its last report came.
	remote []bool
	heard  []time.Time
	waits  uint64
	waited time.Duration
	// remoteWaits are waits for a remote partition, silenced the remote
	// partitions counted idle for their silence.
	remoteWaits, silenced uint64
}

// DefaultRemoteSilence is how long a remote partition may send nothing
// before it counts as idle: longer than a group takes (so that a busy
// partition is not dropped between its deltas), short beside a take-over
// (the lease TTL plus an election), so that survivors stop waiting for a
// dead owner's partitions well before they move.
const DefaultRemoteSilence = 4 * time.Second

// NewSyncClock paces partitions rounds, letting a busy one run at most
// staleness rounds ahead of the slowest busy one (math.MaxInt32: never wait).
func NewSyncClock(partitions, staleness int) *SyncClock {
	c := &SyncClock{staleness: staleness, silence: DefaultRemoteSilence, rounds: make([]uint64, partitions),
		active: make([]bool, partitions), remote: make([]bool, partitions), heard: make([]time.Time, partitions)}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// SetSilence sets how long a remote partition may stay silent before it
// counts as idle (DefaultRemoteSilence).
func (c *SyncClock) SetSilence(d time.Duration) {
	c.mu.Lock()
	c.silence = d
	c.mu.Unlock()
	c.cond.Broadcast()
}

// SetActive marks partition i, run here, busy (it took work) or idle. A
// partition that was idle, or ran on another node, joins at the fastest
// round.
func (c *SyncClock) SetActive(i int, busy bool) {
	c.mu.Lock()
	if busy && (!c.active[i] || c.remote[i]) {
		for _, r := range c.rounds {
			c.rounds[i] = max(c.rounds[i], r)
		}
	}
	c.active[i] = busy
	c.remote[i] = false
	c.mu.Unlock()
	c.cond.Broadcast()
}

// Observe records partition i as another node reported it (its delta,
// applied here): it completed round rounds and is busy or went idle.
// Ignored while i is busy here: then this node runs it.
func (c *SyncClock) Observe(i int, round uint64, busy bool) {
	c.mu.Lock()
	if c.active[i] && !c.remote[i] {
		c.mu.Unlock()
		return
	}
	c.remote[i], c.heard[i] = true, time.Now()
	c.rounds[i], c.active[i] = round, busy
	c.mu.Unlock()
	c.cond.Broadcast()
}

// Round is the rounds partition i completed.
func (c *SyncClock) Round(i int) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rounds[i]
}

// Advance records that partition i merged a round, and waits until no busy
// partition is more than staleness rounds behind it.
func (c *SyncClock) Advance(i int) {
	c.mu.Lock()
	c.rounds[i]++
	c.cond.Broadcast()
	var start time.Time
	remote := false
	for {
		b := c.blocker(i, time.Now())
		if b < 0 {
			break
		}
		if start.IsZero() {
			start = time.Now()
			c.waits++
		}
		if c.remote[b] && !remote {
			remote = true
			c.remoteWaits++
		}
		c.wait(b)
	}
	if !start.IsZero() {
		c.waited += time.Since(start)
	}
	c.mu.Unlock()
}

// blocker is a busy partition more than staleness rounds behind i, or -1.
// A remote partition silent for longer than the silence becomes idle.
func (c *SyncClock) blocker(i int, now time.Time) int {
	for j, r := range c.rounds {
		if j == i || !c.active[j] || r+uint64(c.staleness) >= c.rounds[i] {
			continue
		}
		if c.remote[j] && now.Sub(c.heard[j]) >= c.silence {
			c.active[j] = false
			c.silenced++
			continue
		}
		return j
	}
	return -1
}

// wait waits (c.mu held) for a change, or for remote partition b's
// silence to run out.
func (c *SyncClock) wait(b int) {
	if !c.remote[b] {
		c.cond.Wait()
		return
	}
	t := time.AfterFunc(time.Until(c.heard[b].Add(c.silence)), c.cond.Broadcast)
	c.cond.Wait()
	t.Stop()
}

// ConsistencyStatus is a job's consistency rounds, in its status.
type ConsistencyStatus struct {
	Model     string `json:"model"` // async, bsp or ssp
	Staleness int    `json:"staleness,omitempty"`
	// Rounds are the groups merged by the slowest and the fastest
	// partition; Waits how often a partition waited for others, WaitedMs
	// for how long in all.
	MinRound uint64  `json:"min_round"`
	MaxRound uint64  `json:"max_round"`
	Waits    uint64  `json:"waits"`
	WaitedMs float64 `json:"waited_ms"`
	// Cluster mode: RemoteWaits are the waits for a partition another
	// node runs, RemoteSilent the times such a partition counted as idle
	// because nothing came from it for the silence.
	RemoteWaits  uint64 `json:"remote_waits,omitempty"`
	RemoteSilent uint64 `json:"remote_silent,omitempty"`
	// RemoteSilenceMs is how long a remote partition may stay silent
	// before it counts as idle (sync.remote_silence).
	RemoteSilenceMs float64 `json:"remote_silence_ms,omitempty"`
}

// Status reports the rounds under the consistency model's name.
func (c *SyncClock) Status(model string) *ConsistencyStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := &ConsistencyStatus{Model: model, Staleness: c.staleness, Waits: c.waits, WaitedMs: float64(c.waited) / 1e6,
		RemoteWaits: c.remoteWaits, RemoteSilent: c.silenced, RemoteSilenceMs: float64(c.silence) / 1e6}
	for k, r := range c.rounds {
		if k == 0 || r < st.MinRound {
			st.MinRound = r
		}
		st.MaxRound = max(st.MaxRound, r)
	}
	return st
}
