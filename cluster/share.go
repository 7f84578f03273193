package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/cluster/natsnode"
	"github.com/mlstream/mlstream/runtime"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A Sharing kind's partitions (logreg) send their merged updates as
// deltas to the job's delta stream, one subject per partition; every
// node applies every delta in the stream's order, so all nodes hold the
// same model at the same version (the stream sequence of the last delta
// applied). A delta's headers say which of the partition's events it
// holds, so a new owner resumes the partition's input right after them:
// the delta stream is also the partitions' backup. Each delta is
// published expecting the subject's previous sequence, so after a
// take-over (which publishes a marker) an old owner's delta is refused.

// Headers of a delta message.
const (
	hdrToken    = "Mls-Token"
	hdrNode     = "Mls-Node"
	hdrRec      = "Mls-Rec"
	hdrResume   = "Mls-Resume"
	hdrSkip     = "Mls-Skip"
	hdrMarker   = "Mls-Marker"   // a take-over or hand-over record, not a delta
	hdrReleased = "Mls-Released" // the owner handed the partition over
)

// sharing is a Sharing job's delta stream on this node.
type sharing struct {
	st      *jobState
	sh      runtime.Sharing
	name    string
	applied atomic.Uint64 // stream sequence of the last delta applied: the model's version
	lost    atomic.Uint64 // deltas retention dropped before this node applied them
	// between runs functions on the applier between two deltas.
	between chan func()
	// held is, by partition, the log position after the last delta
	// applied (the applier's own: read it in a between function).
	held   map[int]position
	cancel context.CancelFunc
	done   chan struct{}
}

func (st *jobState) startSharing(ctx context.Context, sh runtime.Sharing) error {
	s := &sharing{st: st, sh: sh, name: deltaStream(st.id), between: make(chan func()), done: make(chan struct{}),
		held: map[int]position{}}
	if _, err := openStream(ctx, st.n.js, st.deltaStreamConfig()); err != nil {
		return err
	}
	if err := s.restore(ctx); err != nil {
		return err
	}
	st.share = s
	sh.ShareDeltas(s.send)
	actx, cancel := context.WithCancel(st.n.ctx)
	s.cancel = cancel
	go s.applyLoop(actx)
	return nil
}

// deltaStreamConfig is the job's delta stream.
func (st *jobState) deltaStreamConfig() jetstream.StreamConfig {
	cfg := st.n.cfg
	return jetstream.StreamConfig{Name: deltaStream(st.id), Subjects: []string{"mls.delta." + st.id + ".*"}, Retention: jetstream.LimitsPolicy,
		MaxAge: cfg.RetentionAge, MaxBytes: cfg.RetentionBytes, Storage: cfg.storage(), Replicas: cfg.Replicas,
		Discard: jetstream.DiscardOld, Description: "mlstream model deltas of job " + st.name()}
}

func (st *jobState) stopSharing() {
	if s := st.share; s != nil && s.cancel != nil {
		s.cancel()
		<-s.done
	}
}

// restore loads the global unit's latest backup, if any: the applier
// then starts after the version it holds.
func (s *sharing) restore(ctx context.Context) error {
	if s.st.ft == nil || s.st.ft.global() == nil {
		return nil
	}
	h, state, ok, err := s.st.n.store().read(ctx, stateKey(s.st.id, -1))
	if err != nil || !ok {
		return err
	}
	u := s.st.ft.global()
	if err := u.unit.RecoverState(bytes.NewReader(state)); err != nil {
		return fmt.Errorf("cluster: restoring the global state of %q: %w", s.st.name(), err)
	}
	u.unit.Recovered(h.Seqs)
	s.applied.Store(h.Version)
	s.st.n.log.Info("global state restored", "job", s.st.name(), "version", h.Version, "bytes", h.Bytes, "from", h.Node)
	return nil
}

// applyLoop applies every delta of the stream in order, from the
// restored version on, and takes the global unit's backups between them.
func (s *sharing) applyLoop(ctx context.Context) {
	defer close(s.done)
	for ctx.Err() == nil {
		err := s.applyFrom(ctx, s.applied.Load()+1)
		if ctx.Err() == nil {
			s.st.n.log.Warn("applying deltas stopped; starting again", "job", s.st.name(), "err", err)
			sleep(ctx, 200*time.Millisecond)
		}
	}
}

func (s *sharing) applyFrom(ctx context.Context, start uint64) error {
	var cons jetstream.Consumer
	err := natsnode.RetryEach(ctx, setupWait, func(ctx context.Context) error {
		var err error
		cons, err = s.st.n.js.OrderedConsumer(ctx, s.name, jetstream.OrderedConsumerConfig{
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start})
		return err
	})
	if err != nil {
		return err
	}
	it, err := cons.Messages(jetstream.PullMaxBytes(64 << 20))
	if err != nil {
		return err
	}
	defer it.Stop()
	msgs := make(chan jetstream.Msg)
	errs := make(chan error, 1)
	go func() {
		for {
			m, err := it.Next()
			if err != nil {
				errs <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			return err
		case fn := <-s.between:
			fn()
		case m := <-msgs:
			if err := s.apply(m); err != nil {
				return err
			}
		}
	}
}

func (s *sharing) apply(m jetstream.Msg) error {
	md, err := m.Metadata()
	if err != nil {
		return err
	}
	seq := md.Sequence.Stream
	if prev := s.applied.Load(); seq > prev+1 && prev > 0 {
		s.lost.Add(seq - prev - 1)
		s.st.n.log.Warn("deltas lost to retention before this node applied them", "job", s.st.name(), "from", prev+1, "to", seq-1)
	}
	if m.Headers().Get(hdrMarker) == "" {
		if err := s.sh.ApplyDelta(m.Data(), seq); err != nil {
			s.st.n.log.Error("unreadable delta skipped", "job", s.st.name(), "seq", seq, "err", err)
		} else if p, err := strconv.Atoi(m.Subject()[strings.LastIndexByte(m.Subject(), '.')+1:]); err == nil {
			s.held[p] = positionOf(m.Headers(), md.Timestamp)
		}
	}
	s.applied.Store(seq)
	return nil
}

// backupNow has the applier back the global unit up between deltas and
// waits for the write.
func (s *sharing) backupNow(u *unitFT) {
	then := make(chan error, 1)
	select {
	case s.between <- func() { s.backupGlobal(then) }:
	case <-time.After(10 * time.Second):
		return
	}
	select {
	case <-then:
	case <-time.After(30 * time.Second):
	}
}

func (s *sharing) backupGlobal(then chan error) {
	if u := s.st.ft.global(); u != nil && u.owned() {
		u.backup(true, then)
		return
	}
	then <- nil
}

// snapshotAll is the global unit's state once this node has applied
// every delta the stream holds now (for a rescale, after the partitions
// drained), and by partition the log position after the events it holds.
func (s *sharing) snapshotAll(ctx context.Context) ([]byte, map[int]position, error) {
	var last uint64
	err := natsnode.RetryEach(ctx, callWait, func(ctx context.Context) error {
		st, err := s.st.n.js.Stream(ctx, s.name)
		if err != nil {
			return err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		last = info.State.LastSeq
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for s.applied.Load() < last {
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("applying the deltas up to %d (at %d): %w", last, s.applied.Load(), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	u := s.st.ft.global()
	if u == nil {
		return nil, nil, errors.New("cluster: the job has no global unit")
	}
	var buf bytes.Buffer
	held := map[int]position{}
	errc := make(chan error, 1)
	select {
	case s.between <- func() {
		maps.Copy(held, s.held)
		errc <- u.unit.BackupState(&buf, true)
	}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	if err := <-errc; err != nil {
		return nil, nil, err
	}
	return buf.Bytes(), held, nil
}

// send is the kind's delta channel (runtime.Sharing.ShareDeltas): on the
// partition's goroutine.
func (s *sharing) send(p int, lastSeq uint64, delta []byte) error {
	ps := s.st.parts[p]
	if !ps.owned.Load() {
		return errNotOwned
	}
	token := ps.token.Load()
	resume, skip, ok := ps.ring.position(lastSeq)
	if !ok {
		err := fmt.Errorf("cluster: log position of event %d unknown", lastSeq)
		go ps.startOver(token, err)
		return err
	}
	m := nats.NewMsg(deltaSubject(s.st.id, p))
	m.Data = delta
	s.stamp(m, token, position{rec: lastSeq, resume: resume, skip: skip})
	seq, err := s.publish(m, ps.lastDelta.Load())
	if errors.Is(err, errFenced) {
		go ps.fencedOff(token)
		return err
	}
	if err != nil {
		// Not stored, and nobody else owns the partition: the partition
		// drops its events from here (the delta's lastSeq would claim the
		// lost ones), so the events the delta held must come again. Its run
		// starts over from its last delta stored, as a take-over does
		// (it dropped them for good, and its consumer stalled once its
		// positions waited for a delta that never came).
		go ps.startOver(token, err)
		return err
	}
	ps.lastDelta.Store(seq)
	ps.ring.backedUp(lastSeq, resume, skip)
	return nil
}

var errNotOwned = errors.New("cluster: this node does not own the partition")

func (s *sharing) stamp(m *nats.Msg, token uint64, pos position) {
	m.Header.Set(hdrToken, strconv.FormatUint(token, 10))
	m.Header.Set(hdrNode, s.st.n.cfg.Node)
	m.Header.Set(hdrRec, strconv.FormatUint(pos.rec, 10))
	m.Header.Set(hdrResume, strconv.FormatUint(pos.resume, 10))
	m.Header.Set(hdrSkip, strconv.Itoa(pos.skip))
}

// publish writes m expecting its subject's last sequence to be last;
// errFenced when it is not.
func (s *sharing) publish(m *nats.Msg, last uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(s.st.n.ctx, 10*time.Second)
	defer cancel()
	var ack *jetstream.PubAck
	// The id makes a retry of a message that was stored (its ack lost in
	// a leader election) a duplicate, not a refused write.
	id := m.Subject + "." + m.Header.Get(hdrToken) + "." + strconv.FormatUint(last, 10)
	err := natsnode.RetryEach(ctx, callWait, func(ctx context.Context) error {
		var err error
		ack, err = s.st.n.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(last), jetstream.WithMsgID(id))
		return err
	})
	if isWrongRevision(err) {
		return 0, errFenced
	}
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// fence takes partition p's delta subject over with token: the last
// message there says where the partition's events resume; a marker
// published after it refuses any later delta of the old owner.
func (s *sharing) fence(ctx context.Context, ps *partState, token uint64) (position, error) {
	subj := deltaSubject(s.st.id, ps.p)
	for {
		var pos position
		var last uint64
		var raw *jetstream.RawStreamMsg
		err := natsnode.RetryEach(ctx, callWait, func(ctx context.Context) error {
			st, err := s.st.n.js.Stream(ctx, s.name)
			if err != nil {
				return err
			}
			raw, err = st.GetLastMsgForSubject(ctx, subj)
			return err
		})
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return pos, err
		default:
			last = raw.Sequence
			if t, _ := strconv.ParseUint(raw.Header.Get(hdrToken), 10, 64); t > token {
				return pos, errFenced
			}
			pos = positionOf(raw.Header, raw.Time)
		}
		m := nats.NewMsg(subj)
		s.stamp(m, token, pos)
		m.Header.Set(hdrMarker, "take-over")
		seq, err := s.publish(m, last)
		if errors.Is(err, errFenced) {
			continue // someone wrote meanwhile: read again
		}
		if err != nil {
			return pos, err
		}
		ps.lastDelta.Store(seq)
		return pos, nil
	}
}

// released publishes a hand-over marker after the partition's last delta.
func (s *sharing) released(ps *partState) {
	pos := ps.ring.basePosition()
	m := nats.NewMsg(deltaSubject(s.st.id, ps.p))
	s.stamp(m, ps.token.Load(), pos)
	m.Header.Set(hdrMarker, "hand-over")
	m.Header.Set(hdrReleased, "true")
	if seq, err := s.publish(m, ps.lastDelta.Load()); err == nil {
		ps.lastDelta.Store(seq)
	}
}

func positionOf(h nats.Header, at time.Time) position {
	rec, _ := strconv.ParseUint(h.Get(hdrRec), 10, 64)
	resume, _ := strconv.ParseUint(h.Get(hdrResume), 10, 64)
	skip, _ := strconv.Atoi(h.Get(hdrSkip))
	return position{rec: rec, resume: resume, skip: skip, from: h.Get(hdrNode), at: at, graceful: h.Get(hdrReleased) != ""}
}
