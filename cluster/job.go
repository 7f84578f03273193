package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mlstream/mlstream/cluster/natsnode"
	"github.com/mlstream/mlstream/runtime"
	"github.com/nats-io/nats.go/jetstream"
)

// jobState is the cluster's side of one job on this node.
type jobState struct {
	n    *Node
	spec runtime.Spec
	inc  string
	id   string // jobID(name, inc)

	started  chan struct{} // closed when start ended; then startErr
	startErr error

	job *runtime.Job // set by Attach
	// ready is set once Attach is done: the streams exist and fault
	// tolerance is set up, so partitions may be taken.
	ready  atomic.Bool
	parts  []*partState
	ft     *clusterFT // nil without fault tolerance
	share  *sharing   // nil unless the kind shares deltas
	source *source    // nil unless the job reads a NATS source

	// global is the lease of the job's global unit (a Sharing kind's
	// model): its holder backs the unit up.
	global struct {
		owned atomic.Bool
		token atomic.Uint64
	}
	streamMu sync.Mutex
	streams  map[int]jetstream.Stream // by group

	seal sealState // a rescale's hold of the job's ingest (rescale.go)
	// rescaled is the rescale that made this incarnation (nil: none).
	rescaled *runtime.RescaleReport
}

func newJobState(n *Node, rec jobRecord) *jobState {
	st := &jobState{n: n, spec: rec.Spec, inc: rec.Incarnation, id: jobID(rec.Spec.Name, rec.Incarnation),
		started: make(chan struct{}), streams: map[int]jetstream.Stream{}, rescaled: rec.LastRescale}
	for p := range rec.Spec.Partitions {
		st.parts = append(st.parts, newPartState(st, p))
	}
	return st
}

func (st *jobState) name() string { return st.spec.Name }

// failed reports whether the job's start ended here in an error that
// another try may not meet (a stream that did not answer in time): not a
// bad spec or a full budget, which would fail again.
func (st *jobState) failed() bool {
	select {
	case <-st.started:
	default:
		return false
	}
	var se *runtime.SpecError
	var be *runtime.BudgetError
	err := st.startErr
	return err != nil && !errors.As(err, &se) && !errors.As(err, &be) && !errors.Is(err, runtime.ErrTooManyJobs)
}

// start runs the job in this node's engine (which calls Attach), then
// takes the partitions whose leases this node holds already.
func (st *jobState) start() {
	defer close(st.started)
	if _, err := st.n.engine.PutJob(st.spec); err != nil {
		st.startErr = err
		st.n.log.Error("a job of the cluster could not start here", "job", st.name(), "err", err)
		return
	}
	st.takePartitions()
}

// takePartitions follows the job's start in the engine: its source is read and
// the partitions whose leases this node holds are taken.
func (st *jobState) takePartitions() {
	if err := st.startSource(); err != nil {
		st.n.log.Error("the job's NATS source cannot be read here", "job", st.name(), "err", err)
	}
	st.n.updateKeys()
	for key, token := range st.n.leases.Owned() {
		if name, p, err := parseLeaseKey(key); err == nil && name == st.name() {
			st.acquire(p, token)
		}
	}
}

func (st *jobState) attach(j *runtime.Job) { st.job = j }

// leaseKeys are the keys of the job's partitions and, for a Sharing kind,
// of its global unit.
func (st *jobState) leaseKeys() []string {
	if st.job == nil {
		return nil
	}
	keys := make([]string, 0, len(st.parts)+1)
	for p := range st.parts {
		keys = append(keys, leaseKey(st.name(), p))
	}
	if st.share != nil {
		keys = append(keys, leaseKey(st.name(), -1))
	}
	return keys
}

// acquire starts owning partition p (p < 0: the global unit).
func (st *jobState) acquire(p int, token uint64) {
	if p < 0 {
		st.global.token.Store(token)
		st.global.owned.Store(true)
		if st.ft != nil {
			st.ft.fenceGlobal(token)
		}
		return
	}
	if p < len(st.parts) {
		st.parts[p].start(token)
	}
}

// release stops owning partition p: graceful takes a last backup first.
func (st *jobState) release(p int, graceful bool) {
	if p < 0 {
		if graceful && st.ready.Load() && st.ft != nil {
			st.ft.backupGlobalNow()
		}
		st.global.owned.Store(false)
		return
	}
	if p < len(st.parts) {
		st.parts[p].stop(graceful)
	}
}

func (st *jobState) releaseAll(graceful bool) {
	st.release(-1, graceful)
	for p := range st.parts {
		st.release(p, graceful)
	}
}

// streamConfigs are the job's input streams, by group.
func (st *jobState) streamConfigs() []jetstream.StreamConfig {
	cfg := st.n.cfg
	g := groups(st.spec.Partitions, cfg.StreamGroups)
	out := make([]jetstream.StreamConfig, g)
	for i := range g {
		var subjects []string
		for p := i; p < st.spec.Partitions; p += g {
			subjects = append(subjects, inputSubject(st.id, p))
		}
		out[i] = jetstream.StreamConfig{Name: inputStream(st.id, i), Subjects: subjects, Retention: jetstream.LimitsPolicy,
			MaxAge: cfg.RetentionAge, MaxBytes: cfg.RetentionBytes / int64(g), Storage: cfg.storage(), Replicas: cfg.Replicas,
			Discard: jetstream.DiscardOld, Description: "mlstream input of job " + st.name()}
	}
	return out
}

// createStreams creates the job's input streams: by the node that stores
// the job, before it does, so that the other nodes only open them (a
// cluster answers several nodes creating one stream at once slowly).
func (st *jobState) createStreams(ctx context.Context) error {
	scs := st.streamConfigs()
	if runtime.Shares(st.spec) {
		scs = append(scs, st.deltaStreamConfig())
	}
	for _, sc := range scs {
		if _, err := openStream(ctx, st.n.js, sc); err != nil {
			return err
		}
	}
	return nil
}

// ensureStreams opens the job's input streams (creating any missing).
func (st *jobState) ensureStreams(ctx context.Context) error {
	for i, sc := range st.streamConfigs() {
		s, err := openStream(ctx, st.n.js, sc)
		if err != nil {
			return err
		}
		st.streamMu.Lock()
		st.streams[i] = s
		st.streamMu.Unlock()
	}
	return nil
}

// group is the stream group of partition p.
func (st *jobState) group(p int) int { return p % groups(st.spec.Partitions, st.n.cfg.StreamGroups) }

func (st *jobState) stream(p int) jetstream.Stream {
	st.streamMu.Lock()
	defer st.streamMu.Unlock()
	return st.streams[st.group(p)]
}

// openStream opens a stream, creating it when missing (every node does
// this for every job: see openKV).
func openStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) (jetstream.Stream, error) {
	var s jetstream.Stream
	err := natsnode.RetryEach(ctx, setupWait, func(ctx context.Context) error {
		var err error
		s, err = js.Stream(ctx, sc.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			s, err = js.CreateStream(ctx, sc)
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				s, err = js.Stream(ctx, sc.Name)
			}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: stream %s: %w", sc.Name, err)
	}
	return s, nil
}
