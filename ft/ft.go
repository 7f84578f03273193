// Package ft is mlstream's approximate fault tolerance, after AF-Stream
// (Huang and Lee, "Toward High-Performance Distributed Stream Processing
// via Approximate Fault Tolerance", PVLDB 2016): an operator's state is
// backed up only when it has drifted past a threshold from its last
// backup, pending events are written to an item log only when too many are
// at risk, and senders are held back when too many items are
// unacknowledged. Three user bounds per
// job, Θ (max_divergence), L (max_pending) and Γ (max_unacked), bound the
// error after any number of crashes: state divergence ≤ Θ + Lα and lost
// outputs ≤ Γ + Lβ, where α is the most one event can move the state and β
// the most outputs one event can produce.
//
// ft knows nothing of operators beyond the Stateful interface; the runtime
// keeps AF-Stream's policy (when to back up, when to log) and drives it.
// The pieces: Controller (the thresholds θ, l, γ and their adaptation),
// Store (where backups go; DirStore is a local directory), ItemLog (the log
// of pending events, a Frame of them per write, replayed whole or not at
// all), the checksummed metadata files beside them (WriteJobFile, SeqMark)
// and LockDir, which keeps a second process off a data directory. Nothing
// on disk is believed without its checksum: a damaged file is reported as
// a *CorruptError and passed over.
//
// Storage is the whole of what the runtime keeps of a job, behind one
// interface: Dir puts it in a local directory, and the runtime does no
// file I/O of its own. Another implementation (JetStream, say: a stream
// per job, a subject per partition) must provide, per job (JobStorage):
//
//   - Claim: an owner tag (the incarnation) checked and set before the
//     job opens anything, rebuilt from the backups (which carry it) when
//     damaged, and the job's data moved aside (never deleted) when
//     another owner's or nobody's; Quarantine, copies of damaged files;
//   - Backups: per unit, Put appending a full backup or a delta in order
//     with increasing indices, Chain returning the newest intact full
//     backup and its intact deltas (and the previous chain when the newest
//     full one is damaged), Usage;
//   - OpenItemLog: per partition, frames appended in sequence order, a
//     flush that survives the process being killed, a commit that survives
//     a power cut (mode exact waits for it before its 202) and the last
//     sequence number a commit covered (Committed, kept across restarts),
//     replay of every intact frame after a sequence number with a frame
//     whole or not at all, damage passed over (the frames after it are
//     replayed) and reported as *ReplayDamage (TornTail when only the end
//     is cut), truncation below a sequence number, LastSeq and Bytes;
//   - OpenSeqMark: per partition, one number rewritten at every request,
//     cheaply (no fsync), that reads back as written or as damaged;
//   - ReadMeta, WriteMeta, RemoveMeta: small named blobs replaced
//     atomically, missing reads as fs.ErrNotExist;
//   - Remove: everything of the job gone, durably.
//
// What it must not do is believe damaged data, or delete it: every read is
// checked, damage is reported (as *CorruptError) rather than returned as
// data, and what the service cannot use is moved or copied aside.
package ft

import (
	"fmt"
	"io"
	"math"
)

// Stateful is what every stateful operator implements: the paper's three
// hooks.
type Stateful interface {
	// StateDivergence is the distance of the live state from the last
	// backup, in the operator's own unit, kept as a running value: O(1).
	StateDivergence() float64
	// BackupState writes a consistent snapshot and restarts the divergence
	// from it: all of the state when full, else only what changed since the
	// previous backup (a delta).
	BackupState(w io.Writer, full bool) error
	// RecoverState rebuilds the state; it is called with the newest full
	// snapshot and then with each following delta, in order.
	RecoverState(r io.Reader) error
}

// Modes of fault tolerance per job.
const (
	ModeNone   = "none"   // no backups: a crash loses the state
	ModeApprox = "approx" // AF-Stream: bounded loss, near-zero cost (default)
	ModeExact  = "exact"  // every accepted event durable before the reply, plus checkpoints: zero loss
)

// Bounds are a job's user bounds.
type Bounds struct {
	Mode string `json:"mode"`
	// MaxDivergence is Θ, in the operator's unit of divergence.
	MaxDivergence float64 `json:"max_divergence"`
	// MaxPending is L: events accepted, unprocessed and not in the item log.
	MaxPending int `json:"max_pending"`
	// MaxUnacked is Γ: items sent downstream and not yet acknowledged.
	MaxUnacked int `json:"max_unacked"`
}

// Thresholds are the runtime thresholds derived from Bounds.
type Thresholds struct {
	Theta float64 `json:"theta"`
	L     int     `json:"l"`
	Gamma int     `json:"gamma"`
}

// Controller keeps one operator copy's thresholds. With n copies of an
// operator (partitions) each starts at Θ/(2n), L/(2n), Γ/(2n) so that the
// budgets add up to one worker's; each halves after every recovery of its
// copy, so the errors of any number of failures sum to a geometric series
// below the bound; a window end resets them. Not safe for concurrent use:
// the runtime guards it.
type Controller struct {
	bounds   Bounds
	copies   int
	failures int
	th       Thresholds
}

// NewController returns the controller of one of n copies that has already
// recovered failures times (the count stored with its backups).
func NewController(b Bounds, n, failures int) *Controller {
	c := &Controller{bounds: b, copies: max(n, 1), failures: failures}
	c.set()
	return c
}

// set computes θ = Θ/(2n·2^k), l = ⌊L/(2n·2^k)⌋, γ = ⌊Γ/(2n·2^k)⌋. After
// enough failures l and γ reach 0: every event is then logged and every
// update acknowledged at once, the error-free mode the paper says halving
// degenerates into, until a window end resets them.
func (c *Controller) set() {
	d := 2 * float64(c.copies) * math.Pow(2, float64(c.failures))
	c.th = Thresholds{
		Theta: c.bounds.MaxDivergence / d,
		L:     int(float64(c.bounds.MaxPending) / d),
		Gamma: int(float64(c.bounds.MaxUnacked) / d),
	}
}

// Thresholds returns the current θ, l, γ.
func (c *Controller) Thresholds() Thresholds { return c.th }

// Failures is the number of recoveries the thresholds account for.
func (c *Controller) Failures() int { return c.failures }

// Recovered halves the thresholds after a recovery.
func (c *Controller) Recovered() {
	c.failures++
	c.set()
}

// ResetWindow restores the initial thresholds at the end of a hopping
// window: the errors of earlier windows no longer count.
func (c *Controller) ResetWindow() {
	c.failures = 0
	c.set()
}

// Bound is the error a crash could cause, or did cause, in the operator's
// units: State in units of divergence, Events and Outputs in counts.
type Bound struct {
	State   float64 `json:"state"`
	Events  int64   `json:"events"`
	Outputs int64   `json:"outputs"`
}

// Promise is the bound that holds over any number of crashes: state
// divergence ≤ Θ + Lα and lost outputs ≤ Γ + Lβ, as in the paper; and, in
// events, ≤ 2L + Γ: at most L pending in queues without an item backup, at
// most L folded into state since its last backup (the runtime backs state
// up on an event count too, with the same l), and at most Γ sent and not
// acknowledged downstream.
func (b Bounds) Promise(alpha, beta float64) Bound {
	return Bound{
		State:   b.MaxDivergence + float64(b.MaxPending)*alpha,
		Events:  int64(2*b.MaxPending + b.MaxUnacked),
		Outputs: int64(float64(b.MaxUnacked) + float64(b.MaxPending)*beta),
	}
}

// Validate checks the bounds of a job spec; the field names are those of
// the spec's ft section.
func (b Bounds) Validate() (field string, err error) {
	switch b.Mode {
	case ModeNone, ModeApprox, ModeExact:
	default:
		return "mode", fmt.Errorf("must be none, approx or exact, got %q", b.Mode)
	}
	if b.MaxDivergence <= 0 || math.IsInf(b.MaxDivergence, 0) || math.IsNaN(b.MaxDivergence) {
		return "max_divergence", fmt.Errorf("must be a positive number, got %v", b.MaxDivergence)
	}
	if b.MaxPending < 1 {
		return "max_pending", fmt.Errorf("must be at least 1, got %d", b.MaxPending)
	}
	if b.MaxUnacked < 1 {
		return "max_unacked", fmt.Errorf("must be at least 1, got %d", b.MaxUnacked)
	}
	return "", nil
}
