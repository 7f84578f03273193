package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/mlstream/mlstream/cluster/natsnode"
	"github.com/mlstream/mlstream/runtime"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// One log message holds at most this many events and bytes: many events
// a message because JetStream's cost is per message (about 10^5 messages
// a second on two cores), a bound because a consumer's pulls must stay
// well under the 64 MiB a connection may be owed.
const (
	maxMsgRecords = 4096
	maxMsgBytes   = 1 << 20
)

// Publish is runtime.Cluster's: each partition's records go to its
// subject as micro-batches, published at once and acknowledged by
// JetStream before it returns. A partition whose owner is more than
// MaxLag events behind refuses the request up front (ErrBusy: 429); so
// does a request JetStream has not acknowledged within PublishWait (a
// stream leader election after a node died takes seconds). Each message
// carries an id, so a retry of a message that did reach the stream is
// dropped by JetStream's duplicate window rather than stored twice.
func (n *Node) Publish(ctx context.Context, j *runtime.Job, parts [][]runtime.Record) error {
	st := n.runningJob(j)
	if st == nil {
		return fmt.Errorf("%w: job %q is not ready on this node yet", runtime.ErrBusy, j.Name())
	}
	if st.seal.wanted.Load() {
		// Sealed for a rescale, and this request got past the hold (it
		// was admitted before, or the node started the job meanwhile):
		// nothing of it may reach the old streams after their drain.
		return fmt.Errorf("%w: job %q is being rescaled", runtime.ErrBusy, j.Name())
	}
	if err := n.lags.check(st, parts, n.cfg.MaxLag); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.PublishWait)
	defer cancel()
	msgs := st.messages(parts, runtime.IngestKey(ctx))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for {
		if err := n.publishAll(ctx, msgs, futures); err != nil {
			return err
		}
		failed := n.awaitAcks(ctx, msgs, futures)
		if len(failed) == 0 {
			n.stats.published.Add(uint64(len(msgs)))
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: the cluster did not acknowledge %d of %d messages of job %q within %s (after a node failure a stream elects a new leader within seconds)",
				runtime.ErrBusy, len(failed), len(msgs), j.Name(), n.cfg.PublishWait)
		}
		msgs, futures = failed, futures[:len(failed)]
		sleep(ctx, 50*time.Millisecond)
	}
}

// messages encodes parts as log messages with ids: from the request's
// idempotency key when it has one, so that a client's retry of a request
// that was partly stored adds only the rest (within JetStream's duplicate
// window, 2 minutes).
func (st *jobState) messages(parts [][]runtime.Record, key string) []*nats.Msg {
	var msgs []*nats.Msg
	req := nuid.Next()
	if key != "" {
		req = "k." + key + "." + st.id
	}
	for p, recs := range parts {
		for i := 0; len(recs) > 0; i++ {
			k := min(len(recs), maxMsgRecords)
			data := runtime.AppendRecords(make([]byte, 0, 24*k), recs[:k])
			for len(data) > maxMsgBytes && k > 1 {
				k /= 2
				data = runtime.AppendRecords(data[:0], recs[:k])
			}
			m := nats.NewMsg(inputSubject(st.id, p))
			m.Data = data
			m.Header.Set(jetstream.MsgIDHeader, req+"."+strconv.Itoa(p)+"."+strconv.Itoa(i))
			msgs = append(msgs, m)
			recs = recs[k:]
		}
	}
	return msgs
}

// publishAll starts the publication of msgs; a full async window is
// backpressure: it waits for room until ctx ends.
func (n *Node) publishAll(ctx context.Context, msgs []*nats.Msg, futures []jetstream.PubAckFuture) error {
	for i, m := range msgs {
		for {
			f, err := n.js.PublishMsgAsync(m)
			if err == nil {
				futures[i] = f
				break
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) && !natsnode.Transient(err) {
				return fmt.Errorf("cluster: publishing: %w", err)
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%w: the cluster's publish window stayed full for %s", runtime.ErrBusy, n.cfg.PublishWait)
			}
			sleep(ctx, 10*time.Millisecond)
		}
	}
	return nil
}

// awaitAcks waits for every acknowledgement (or ctx) and returns the
// messages that failed or were not acknowledged.
func (n *Node) awaitAcks(ctx context.Context, msgs []*nats.Msg, futures []jetstream.PubAckFuture) []*nats.Msg {
	var failed []*nats.Msg
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if !natsnode.Transient(err) && !errors.Is(err, context.DeadlineExceeded) {
				n.log.Warn("publish failed", "subject", msgs[i].Subject, "err", err)
			}
			failed = append(failed, msgs[i])
		case <-ctx.Done():
			failed = append(failed, msgs[i])
		}
	}
	return failed
}

// lagTable holds how far behind each partition's owner is, as the owners
// report it every lagEvery.
type lagTable struct {
	mu   sync.Mutex
	lags map[string]lagEntry // id.p → lag
	sub  *nats.Subscription
	loop *loop
}

type lagEntry struct {
	lagReport
	at time.Time
}

const lagEvery = 250 * time.Millisecond

// lagReport is what an owner reports of a partition: how far behind it
// is, and, for the autoscaler (autoscale.go), its work so far.
type lagReport struct {
	ID  string `json:"id"`
	P   int    `json:"p"`
	Lag int64  `json:"lag"`
	// Offered is the events the partition's subject holds by sequence
	// number: those handed to the partition and those not fetched yet.
	Offered   uint64 `json:"offered"`
	Processed uint64 `json:"processed"`
	BusyNs    int64  `json:"busy_ns"`
	Owner     string `json:"owner"` // node and lease token: whose counters
}

func (t *lagTable) start(n *Node) error {
	t.lags = map[string]lagEntry{}
	var err error
	t.sub, err = n.nc.Subscribe(lagSubject, func(m *nats.Msg) {
		var reps []lagReport
		if json.Unmarshal(m.Data, &reps) == nil {
			t.record(reps)
		}
	})
	if err != nil {
		return err
	}
	t.loop = startLoop(lagEvery, func() { t.report(n) })
	return nil
}

func (t *lagTable) record(reps []lagReport) {
	now := time.Now()
	t.mu.Lock()
	for _, r := range reps {
		t.lags[r.ID+"."+strconv.Itoa(r.P)] = lagEntry{r, now}
	}
	t.mu.Unlock()
}

// report publishes the lag of the partitions this node owns.
func (t *lagTable) report(n *Node) {
	var reps []lagReport
	for _, st := range n.jobsList() {
		for _, ps := range st.parts {
			if ps.owned.Load() {
				reps = append(reps, ps.report())
			}
		}
	}
	if len(reps) > 0 {
		data, _ := json.Marshal(reps)
		_ = n.nc.Publish(lagSubject, data)
	}
}

// report is the owner's lagReport of the partition.
func (ps *partState) report() lagReport {
	r := lagReport{ID: ps.st.id, P: ps.p, Lag: ps.lag.Load(),
		Owner: ps.st.n.cfg.Node + "/" + strconv.FormatUint(ps.token.Load(), 10)}
	if j := ps.st.job; j != nil {
		r.Lag = max(r.Lag, j.Depth(ps.p))
		r.Offered = j.NextSeq(ps.p) - 1 + uint64(max(ps.unfetched.Load(), 0))
		load := j.PartitionLoad(ps.p)
		r.Processed, r.BusyNs = load.Processed, int64(load.Busy)
	}
	return r
}

// latest is the fresh reports of partitions 0..n-1 of job id (ok false
// when one is missing or stale).
func (t *lagTable) latest(id string, n int) ([]lagReport, bool) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]lagReport, n)
	for p := range n {
		e, ok := t.lags[id+"."+strconv.Itoa(p)]
		if !ok || now.Sub(e.at) >= 4*lagEvery {
			return nil, false
		}
		out[p] = e.lagReport
	}
	return out, true
}

func (t *lagTable) check(st *jobState, parts [][]runtime.Record, maxLag int64) error {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for p, recs := range parts {
		if len(recs) == 0 {
			continue
		}
		e, ok := t.lags[st.id+"."+strconv.Itoa(p)]
		if ok && now.Sub(e.at) < 4*lagEvery && e.Lag > maxLag {
			return fmt.Errorf("%w: partition %d of job %q is %d events behind (more than --cluster-max-lag %d)",
				runtime.ErrBusy, p, st.name(), e.Lag, maxLag)
		}
	}
	return nil
}

func (t *lagTable) stop() {
	t.loop.stop()
	if t.sub != nil {
		_ = t.sub.Unsubscribe()
	}
}
