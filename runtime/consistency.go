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
type SyncClock struct {
	staleness int
	mu        sync.Mutex
	cond      *sync.Cond
	rounds    []uint64
	active    []bool
	waits     uint64
	waited    time.Duration
}

// NewSyncClock paces partitions rounds, letting a busy one run at most
// staleness rounds ahead of the slowest busy one (math.MaxInt32: never wait).
func NewSyncClock(partitions, staleness int) *SyncClock {
	c := &SyncClock{staleness: staleness, rounds: make([]uint64, partitions), active: make([]bool, partitions)}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// SetActive marks partition i busy (it took work) or idle.
func (c *SyncClock) SetActive(i int, busy bool) {
	c.mu.Lock()
	if busy && !c.active[i] {
		for _, r := range c.rounds {
			c.rounds[i] = max(c.rounds[i], r)
		}
	}
	c.active[i] = busy
	c.mu.Unlock()
	c.cond.Broadcast()
}

// Advance records that partition i merged a round, and waits until no busy
// partition is more than staleness rounds behind it.
func (c *SyncClock) Advance(i int) {
	c.mu.Lock()
	c.rounds[i]++
	c.cond.Broadcast()
	var start time.Time
	for c.behind(i) {
		if start.IsZero() {
			start = time.Now()
			c.waits++
		}
		c.cond.Wait()
	}
	if !start.IsZero() {
		c.waited += time.Since(start)
	}
	c.mu.Unlock()
}

func (c *SyncClock) behind(i int) bool {
	for j, r := range c.rounds {
		if j != i && c.active[j] && r+uint64(c.staleness) < c.rounds[i] {
			return true
		}
	}
	return false
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
}

// Status reports the rounds under the consistency model's name.
func (c *SyncClock) Status(model string) *ConsistencyStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := &ConsistencyStatus{Model: model, Staleness: c.staleness, Waits: c.waits, WaitedMs: float64(c.waited) / 1e6}
	for k, r := range c.rounds {
		if k == 0 || r < st.MinRound {
			st.MinRound = r
		}
		st.MaxRound = max(st.MaxRound, r)
	}
	return st
}
