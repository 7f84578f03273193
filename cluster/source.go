package cluster

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/mlstream/mlstream/cluster/natsnode"
	"github.com/mlstream/mlstream/runtime"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/valyala/fastjson"
)

// A job's source (runtime.SourceSpec) is a NATS subject or JetStream
// stream other systems publish to: the queue-based ingestion users
// otherwise get from Kafka. Every node reads it, the broker spreading the
// messages over them (a queue group, or pullers of one durable consumer),
// and ingests each message as a request to the job's input stream: the
// same extraction and errors as HTTP, the same log. A JetStream message
// is acknowledged once the cluster stored its events, and redelivered
// when the cluster was busy; a malformed one is terminated, logged and
// counted as refused (bad_input). Core NATS has no acknowledgement: a
// message a busy cluster cannot take is retried here for sourceWait, then
// counted as refused (busy) and logged.

// allowSources lets the source clients of this node's NATS listener
// (--nats-listen's source user) publish to the subjects the jobs known
// here read, and to nothing else; it follows every job added, replaced or
// removed. A stream source counts with its subject filter: without one,
// the subjects of its stream are the operator's, who publishes to them as
// the admin user.
func (n *Node) allowSources() {
	// Read and applied under one lock: a list read earlier must not be applied after a newer
	// one (the watcher and the periodic reconciliation both call this).
	n.sourcesMu.Lock()
	defer n.sourcesMu.Unlock()
	var subjects []string
	for _, st := range n.jobsList() {
		if src := st.spec.Source; src != nil && src.Subject != "" {
			subjects = append(subjects, src.Subject)
		}
	}
	if err := n.cfg.NATS.SetSourceSubjects(subjects); err != nil {
		n.log.Error("source clients keep their previous subjects", "subjects", subjects, "err", err)
	}
}

// sourceWait is how long a source message waits for a busy cluster.
const sourceWait = 30 * time.Second

type source struct {
	st     *jobState
	cancel context.CancelFunc
	done   chan struct{}
	sub    *nats.Subscription
}

// startSource starts reading the job's source on this node, if it has
// one.
func (st *jobState) startSource() error {
	spec := st.spec.Source
	if spec == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(st.n.ctx)
	src := &source{st: st, cancel: cancel, done: make(chan struct{})}
	if spec.Stream == "" {
		var err error
		src.sub, err = st.n.nc.QueueSubscribe(spec.Subject, "mls-src-"+st.id, func(m *nats.Msg) { src.ingest(ctx, m.Data) })
		if err != nil {
			cancel()
			return err
		}
		close(src.done)
	} else {
		go src.consume(ctx)
	}
	st.source = src
	return nil
}

func (st *jobState) stopSource() {
	if src := st.source; src != nil {
		src.cancel()
		if src.sub != nil {
			_ = src.sub.Unsubscribe()
		}
		<-src.done
	}
}

// consume pulls the source stream with the job's durable consumer until
// ctx ends.
func (src *source) consume(ctx context.Context) {
	defer close(src.done)
	spec := src.st.spec.Source
	cfg := jetstream.ConsumerConfig{Durable: "mls-src-" + src.st.id, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: time.Minute, MaxDeliver: -1, FilterSubject: spec.Subject, MaxAckPending: 256}
	for ctx.Err() == nil {
		var cons jetstream.Consumer
		err := natsnode.RetryEach(ctx, setupWait, func(ctx context.Context) error {
			var err error
			cons, err = src.st.n.js.CreateOrUpdateConsumer(ctx, spec.Stream, cfg)
			return err
		})
		if err == nil {
			err = src.pull(ctx, cons)
		}
		if ctx.Err() == nil {
			src.st.n.log.Warn("reading the job's source stream; starting again", "job", src.st.name(), "stream", spec.Stream, "err", err)
			sleep(ctx, time.Second)
		}
	}
}

func (src *source) pull(ctx context.Context, cons jetstream.Consumer) error {
	it, err := cons.Messages(jetstream.PullMaxBytes(16<<20), jetstream.PullExpiry(4*time.Second), jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); it.Stop() }()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			if natsnode.Transient(err) || errors.Is(err, jetstream.ErrNoHeartbeat) {
				continue
			}
			return err
		}
		switch src.ingest(ctx, m.Data()) {
		case nil:
			_ = m.Ack()
		case errBadSource:
			_ = m.Term()
		default:
			_ = m.NakWithDelay(time.Second)
		}
	}
}

var errBadSource = errors.New("cluster: malformed source message")

// ingest takes one source message as one request to the job's input
// stream.
func (src *source) ingest(ctx context.Context, data []byte) error {
	st := src.st
	stream := st.spec.Input
	deadline := time.Now().Add(sourceWait)
	for {
		n, err := src.commit(ctx, stream, data)
		switch {
		case err == nil:
			st.n.stats.sourced.Add(uint64(n))
			return nil
		case errors.Is(err, errBadSource):
			st.n.engine.Refused(stream, "bad_input", max(n, 1))
			st.n.log.Warn("source message refused", "job", st.name(), "err", err)
			return err
		case errors.Is(err, runtime.ErrBusy) && time.Now().Before(deadline) && ctx.Err() == nil && st.spec.Source.Stream == "":
			sleep(ctx, 100*time.Millisecond)
		default:
			if st.spec.Source.Stream == "" {
				st.n.log.Warn("source message not taken", "job", st.name(), "events", n, "err", err)
			}
			return err
		}
	}
}

// commit parses data (an object, an array of them, or NDJSON) into one
// batch of the input stream and commits it.
func (src *source) commit(ctx context.Context, stream string, data []byte) (int, error) {
	b, err := src.st.n.engine.NewBatch(stream)
	if err != nil {
		return 0, err
	}
	var p fastjson.Parser
	line := 0
	for len(data) > 0 {
		var l []byte
		l, data, _ = bytes.Cut(data, []byte{'\n'})
		line++
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		v, err := p.ParseBytes(l)
		if err != nil {
			return line, errors.Join(errBadSource, err)
		}
		vals := []*fastjson.Value{v}
		if v.Type() == fastjson.TypeArray {
			vals, _ = v.Array()
		}
		for _, e := range vals {
			if err := b.Add(e, line); err != nil {
				return line, errors.Join(errBadSource, err)
			}
		}
	}
	return b.Commit(ctx)
}
