package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/mlstream/mlstream/runtime"
	"github.com/nats-io/nats.go/jetstream"
)

// Retiring the incarnation a rescale replaced. Its input streams are not
// simply deleted at the commit: a node that passed the seal's check and
// then stalled past its lease (SIGSTOP, a long pause) is not asked to
// confirm the seal, and may still publish a request into them after the
// drain, which JetStream would acknowledge. So, once every node runs the
// new layout:
//
//  1. the old input streams are sealed: JetStream refuses every publish
//     into them from then on, and a late request fails (its client
//     retries, into the new layout) instead of being acknowledged;
//  2. every message of a partition's log after what the moved state holds
//     of it (a straggler, stored after the drain, unless a backup after
//     the drain took it in and the move restored that one) is forwarded
//     into the new layout, routed as ingest routes it, under message ids
//     made from its position, so that a second forwarding (by another
//     node) is dropped as a duplicate;
//  3. the old streams and state are deleted;
//  4. the job's entry forgets the retirement.
//
// The entry keeps what that needs (retirement) until step 4, so that a
// coordinator that dies after the commit leaves the work to any node
// (reconcile, after retireGrace), and a new rescale of the job first
// finishes it.

// retirement is what a job's entry keeps of the incarnation it replaced
// (jobRecord.Previous) until its streams are retired.
type retirement struct {
	Partitions int `json:"partitions"`
	// Held is, by old partition, what of its log the state the rescale
	// moved holds: what comes after is forwarded.
	Held []heldPosition `json:"held"`
	At   time.Time      `json:"at"`
}

// heldPosition is a log position: every message before Resume (a stream
// sequence), and Skip events of the partition's message at Resume.
type heldPosition struct {
	Resume uint64 `json:"resume"`
	Skip   int    `json:"skip,omitempty"`
}

// held is what of the log a state at position p holds.
func (p position) held() heldPosition { return heldPosition{Resume: p.resume, Skip: p.skip} }

// retireGrace is how long after a commit another node takes over a
// retirement that the coordinator has not finished: the coordinator
// waits up to applyWait for the nodes to run the new layout first.
const retireGrace = applyWait + everyNodeWait

// previous is the incarnation rec replaced, as a record of its own.
func (rec jobRecord) previous() jobRecord {
	old := rec
	old.Spec.Partitions, old.Incarnation = rec.Retire.Partitions, rec.Previous
	old.Retire, old.Rescale = nil, nil
	return old
}

// retirePrevious retires the incarnation job name's entry says it
// replaced, if it has not been yet, and returns the entry as it left it
// and its revision. One retirement of a job at a time on a node: it waits
// for one under way.
func (n *Node) retirePrevious(ctx context.Context, name string) (jobRecord, uint64, error) {
	unlock, ok := n.lockRetirement(ctx, name, true)
	if !ok {
		return jobRecord{}, 0, ctx.Err()
	}
	defer unlock()
	return n.retire(ctx, name)
}

// retire is retirePrevious with the job's retirement lock held.
func (n *Node) retire(ctx context.Context, name string) (jobRecord, uint64, error) {
	rec, rev, err := n.readJobEntry(ctx, name)
	if err != nil || rec.Retire == nil {
		return rec, rev, err
	}
	old := rec.previous()
	if err := n.sealStreams(ctx, old); err != nil {
		return rec, rev, err
	}
	forwarded, err := n.forwardStragglers(ctx, rec.Spec.Name, old, rec.Retire.Held)
	if err != nil {
		return rec, rev, fmt.Errorf("forwarding the events stored after the drain: %w", err)
	}
	n.removeJobData(ctx, old)
	if rec, rev, err = n.forgetRetirement(ctx, name, rec.Incarnation); err != nil {
		return rec, rev, err
	}
	n.stats.retired.Add(1)
	n.stats.lateEvents.Add(uint64(forwarded))
	n.log.Info("previous layout retired", "job", name, "incarnation", old.Incarnation, "partitions", old.Spec.Partitions,
		"forwarded_events", forwarded)
	return rec, rev, nil
}

// lockRetirement takes job name's retirement lock on this node, waiting
// (until ctx ends) or not; ok=false when it was not taken.
func (n *Node) lockRetirement(ctx context.Context, name string, wait bool) (unlock func(), ok bool) {
	v, _ := n.retiring.LoadOrStore(name, make(chan struct{}, 1))
	lock := v.(chan struct{})
	unlock = func() { <-lock }
	select {
	case lock <- struct{}{}:
		return unlock, true
	default:
	}
	if !wait {
		return nil, false
	}
	select {
	case lock <- struct{}{}:
		return unlock, true
	case <-ctx.Done():
		return nil, false
	}
}

// sealStreams seals old's input streams (those already gone are passed
// over): JetStream stores nothing more in them.
func (n *Node) sealStreams(ctx context.Context, old jobRecord) error {
	for _, sc := range newJobState(n, old).streamConfigs() {
		sc.Sealed = true
		if _, err := n.js.UpdateStream(ctx, sc); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("sealing stream %s: %w", sc.Name, err)
		}
	}
	return nil
}

// forwardStragglers publishes into job name's current layout the events
// of every message of layout old after what held says the moved state
// holds of each partition; it returns how many events that was.
func (n *Node) forwardStragglers(ctx context.Context, name string, old jobRecord, held []heldPosition) (int, error) {
	oldID := jobID(old.Spec.Name, old.Incarnation)
	g := groups(old.Spec.Partitions, n.cfg.StreamGroups)
	total := 0
	for p, held := range held {
		s, err := n.js.Stream(ctx, inputStream(oldID, p%g))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return total, err
		}
		for seq := max(held.Resume, 1); ; {
			m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(inputSubject(oldID, p)))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return total, err
			}
			skip := 0
			if m.Sequence == held.Resume {
				skip = held.Skip // the state holds the first events of this one
			}
			k, err := n.forward(ctx, name, "fwd."+oldID+"."+strconv.FormatUint(m.Sequence, 10), m.Data, skip)
			if err != nil {
				return total, err
			}
			total += k
			seq = m.Sequence + 1
		}
	}
	return total, nil
}

// forward publishes the events of one old message but its first skip
// into job name's current layout, under ingest key key; it returns how
// many there were. A message that does not decode held nothing any
// partition could have counted.
func (n *Node) forward(ctx context.Context, name, key string, data []byte, skip int) (int, error) {
	l, err := runtime.DecodeLogged(data)
	if err != nil {
		n.log.Warn("a message of a retired layout does not decode: not forwarded", "job", name, "key", key, "err", err)
		return 0, nil
	}
	defer l.Release()
	recs := l.Recs[min(skip, len(l.Recs)):]
	if len(recs) == 0 {
		return 0, nil
	}
	ctx = runtime.WithIngestKey(ctx, key)
	for {
		j, err := n.engine.Job(name)
		if err == nil {
			if err = n.Publish(ctx, j, j.Route(recs)); err == nil {
				return len(recs), nil
			}
		}
		if !errors.Is(err, runtime.ErrBusy) || ctx.Err() != nil {
			return 0, err
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// forgetRetirement clears the retirement of incarnation inc from job
// name's entry and returns the entry and its revision after that. A read
// may be a replica's, a write or two behind: on a wrong revision it reads
// again, a moment later.
func (n *Node) forgetRetirement(ctx context.Context, name, inc string) (jobRecord, uint64, error) {
	for {
		rec, rev, err := n.readJobEntry(ctx, name)
		if err != nil || rec.Incarnation != inc || rec.Retire == nil {
			return rec, rev, err
		}
		rec.Retire = nil
		data, err := json.Marshal(rec)
		if err != nil {
			return rec, rev, err
		}
		rev, err = n.jobsKV.Update(ctx, name, data, rev)
		if err == nil || !isWrongRevision(err) {
			return rec, rev, err
		}
		sleep(ctx, 20*time.Millisecond)
		if ctx.Err() != nil {
			return rec, rev, ctx.Err()
		}
	}
}

// retireStale takes over the retirement of job entry e's previous layout
// when its coordinator has not finished it within retireGrace.
func (n *Node) retireStale(e jetstream.KeyValueEntry) {
	var rec jobRecord
	if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &rec) != nil || rec.Retire == nil ||
		rec.Rescale != nil || time.Since(rec.Retire.At) < retireGrace {
		return
	}
	unlock, ok := n.lockRetirement(n.ctx, e.Key(), false)
	if !ok {
		return // under way here
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer unlock()
		ctx, cancel := context.WithTimeout(n.ctx, applyWait)
		defer cancel()
		if _, _, err := n.retire(ctx, e.Key()); err != nil {
			n.log.Warn("retiring a rescaled job's previous layout", "job", e.Key(), "err", err)
		}
	}()
}
