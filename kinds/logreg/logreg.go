// Package logreg is the job kind "logreg": online logistic regression,
// one learner per partition over a shared global model (package learners,
// a parameter-server design), with progressive validation, predictions,
// load shedding of training events and consistency rounds.
package logreg

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// Name is the kind's name in a spec.
const Name = "logreg"

func init() { runtime.Register(kind()) }

// kind declares the kind to the engine.
func kind() runtime.Kind {
	return runtime.Kind{
		Name: Name, New: newLogregJob, Memory: memory,
		Divergence: 10, // Euclidean distance of the weights; AF-Stream's setting for its logistic regression
		Shed: &runtime.ShedPolicy{
			Drops:     "training events (labelled); predictions and delayed labels are always kept",
			Sheddable: func(r *runtime.Record) bool { return r.Label >= 0 && r.Side == 0 },
		},
		Consistent: true,
		Spreadable: true,
		Messages:   []string{TypePrediction, TypeDrift},
		Describe:   describe,
	}
}

var (
	_ runtime.Predicting    = (*logregJob)(nil)
	_ runtime.FaultTolerant = (*logregJob)(nil)
	_ runtime.Unacking      = (*logregJob)(nil)
	_ runtime.Collecting    = (*logregJob)(nil)
	_ runtime.LiveDiverging = (*logregJob)(nil)
)

// logregJob is a job of kind logreg. Params: the learner's (hash_bits,
// optimizer, alpha, beta, l1, l2, clip, normalize, adaptive, window),
// names_slots (names.go), on_drift (drift.go) and the field names. Partitions merge at the end of each group of batches
// (Operator.Coordinate), waiting for each other as the job's consistency
// says (runtime.SyncClock).
type logregJob struct {
	name   string
	fields runtime.Fields
	model  *learners.Model
	// normDefault: the spec does not set normalize; the job takes that of
	// a model it imports.
	normDefault bool
	window      int
	parts       []*logregPart
	ft          runtime.FT // nil without fault tolerance
	// clock paces the partitions' merges: async, bsp or ssp.
	consistency string
	clock       *runtime.SyncClock

	// merge serialises merges of partitions into the global model, and the
	// backups of it, so that a backup is a consistent cut: the model holds
	// exactly the events up to lastSeqs of each partition.
	merge struct {
		sync.Mutex
		tracker  *learners.Tracker // nil without fault tolerance
		lastSeqs []uint64
		learned  int64
	}
	maxFeats atomic.Int64 // most features seen in one event, for alpha
	// swap is held shared by each partition for a batch and by predictions,
	// exclusively by a model import or export (modelio.go).
	swap sync.RWMutex
	// names maps slots to the feature names seen there (names.go).
	names *nameDict
	// drifts counts the drifts the partitions' detectors found (drift.go).
	drifts drifts
	// share is on in cluster mode: merges send deltas (share.go).
	share jobShare
	// labels are the delayed-label params (labels.go), nparts the
	// partitions the spec asks for.
	labels labelParams
	nparts int
	// fast: the fields allow the byte fast path (fastpath.go).
	fast bool
	// committed are the partitions' pending sets as of their last merge,
	// for backups (labels_ft.go); under merge.
	committed []*committedPending

	mu struct {
		sync.Mutex
		snap   learners.Snapshot // cached, refreshed at most every second
		snapAt time.Time
	}
}

func newLogregJob(spec runtime.Spec, p *runtime.Params) (runtime.Instance, error) {
	cfg := learners.DefaultConfig()
	var err error
	if cfg.HashBits, err = p.Int("hash_bits", cfg.HashBits, 1, maxHashBits); err != nil {
		return nil, err
	}
	if cfg.Optimizer, err = p.String("optimizer", cfg.Optimizer, "ftrl", "adagrad", "sgd"); err != nil {
		return nil, err
	}
	// Alpha's default depends on the optimizer; 0 lets EnsureDefaults pick.
	if cfg.Alpha, err = p.Float("alpha", 0, 1e-9, 1e6); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		dst  *float64
	}{{"beta", &cfg.Beta}, {"l1", &cfg.L1}, {"l2", &cfg.L2}, {"clip", &cfg.Clip}} {
		if *f.dst, err = p.Float(f.name, *f.dst, 0, 1e9); err != nil {
			return nil, err
		}
	}
	// Left empty, normalize is the default, and a model read from a
	// backup or an import keeps the normalization it was learned with
	// (learners.Model.ReadFrom, UseNormalize).
	if cfg.Normalize, err = p.String("normalize", "", learners.NormalizeSqrt, learners.NormalizeNone, learners.NormalizeL2, learners.NormalizeLog1pL2); err != nil {
		return nil, err
	}
	adaptive, err := p.Bool("adaptive", true)
	if err != nil {
		return nil, err
	}
	cfg.Adaptive = &adaptive
	if cfg.Window, err = p.Int("window", cfg.Window, 1, maxLogregWindow); err != nil {
		return nil, err
	}
	fields, err := runtime.ReadFields(p)
	if err != nil {
		return nil, err
	}
	nameSlots, err := p.Int("names_slots", DefaultNameSlots, 0, maxNameSlots)
	if err != nil {
		return nil, err
	}
	onDrift, err := readOnDrift(p)
	if err != nil {
		return nil, err
	}
	labels, err := readLabelParams(p)
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		if pe, ok := err.(*learners.ParamError); ok {
			return nil, runtime.ParamError(pe.Param, "%s", pe.Msg)
		}
		return nil, err
	}
	model, err := learners.NewModel(cfg)
	if err != nil {
		return nil, err
	}
	staleness := map[string]int{runtime.ConsistencyAsync: math.MaxInt32, runtime.ConsistencyBSP: 0, runtime.ConsistencySSP: spec.Sync.Staleness}[spec.Sync.Consistency]
	j := &logregJob{name: spec.Name, fields: fields, model: model, normDefault: cfg.Normalize == "", window: cfg.Window, names: newNameDict(nameSlots),
		consistency: spec.Sync.Consistency, clock: runtime.NewSyncClock(spec.Partitions, staleness),
		labels: labels, nparts: spec.Partitions}
	j.drifts.onDrift = onDrift
	j.fast = fastFields(fields, labels.idField)
	if spec.Sync.Consistency != runtime.ConsistencyAsync {
		j.clock.SetSilence(runtime.RemoteSilenceOf(spec.Sync))
	}
	return j, nil
}

// Extract reads the key, event time, label, features and, of an
// unlabelled event, the id that holds its prediction for a delayed label.
func (j *logregJob) Extract(v *fastjson.Value, rec *runtime.Record, a *runtime.Arena, now int64) error {
	var err error
	if rec.Key, err = runtime.ExtractKey(v, j.fields.Key, a); err != nil {
		return err
	}
	if rec.TS, err = runtime.ExtractTS(v, j.fields.TS, now); err != nil {
		return err
	}
	if rec.Label, err = runtime.ExtractLabel(v, j.fields.Label); err != nil {
		return err
	}
	id, err := extractID(v, j.labels.idField, a)
	if err != nil {
		return err
	}
	if id != "" && rec.Label < 0 {
		holdID(rec, id, a)
	}
	rec.Features, err = a.Features(v, j.fields.Features)
	if err == nil && j.names.sample() {
		j.names.observe(v.Get(j.fields.Features), rec.Features, j.model)
	}
	return err
}

func (j *logregJob) NewPartition(index int, out runtime.Emitter) runtime.Operator {
	p := &logregPart{job: j, index: index, out: out, learner: j.model.NewLearner(), prog: learners.NewProgressive(j.window),
		drift: learners.NewPageHinkley(), limit: math.MaxInt, pend: j.newPending()}
	p.share.landing = make(chan struct{}, 1)
	p.pub.snap = p.prog.Clone()
	if j.sharing() {
		p.learner.SetShared()
	}
	j.parts = append(j.parts, p)
	j.merge.lastSeqs = append(j.merge.lastSeqs, 0)
	j.committed = append(j.committed, newCommittedPending())
	return p
}

// metrics merges the partitions' published progressive metrics.
func (j *logregJob) metrics() learners.Metrics {
	all := learners.NewProgressive(j.window)
	for _, p := range j.parts {
		p.pub.Lock()
		all.Merge(p.pub.snap)
		p.pub.Unlock()
	}
	return all.Summary()
}

// Status is the kind's section of the job status.
type Status struct {
	Consistency *runtime.ConsistencyStatus `json:"consistency,omitempty"`
	Model       *learners.Snapshot         `json:"model,omitempty"`
	Metrics     *learners.Metrics          `json:"metrics,omitempty"`
	Drift       *DriftStatus               `json:"drift,omitempty"`
	Labels      *LabelStatus               `json:"labels,omitempty"`
	// Deltas is there in cluster mode (share.go).
	Deltas *DeltaStatus `json:"deltas,omitempty"`
}

// StatusOf is a logreg job's section of its status, nil for another kind.
func StatusOf(st runtime.JobStatus) *Status {
	s, _ := runtime.SectionAs[*Status](st)
	return s
}

func (j *logregJob) Status(detail bool) any {
	j.mu.Lock()
	// A snapshot scans every weight: at most one a second, whatever the
	// number of readers; the version is always the current one.
	if time.Since(j.mu.snapAt) > time.Second {
		j.mu.snap = j.model.Snapshot(false, 0)
		j.mu.snapAt = time.Now()
	}
	snap := j.mu.snap
	j.mu.Unlock()
	snap.Version = j.model.Version()
	m := j.metrics()
	st := &Status{Model: &snap, Metrics: &m, Consistency: j.clock.Status(j.consistency), Drift: j.drifts.status(),
		Deltas: j.deltaStatus(), Labels: j.labelStatus()}
	if j.consistency != runtime.ConsistencySSP {
		st.Consistency.Staleness = 0
	}
	if j.consistency == runtime.ConsistencyAsync {
		st.Consistency.RemoteSilenceMs = 0 // nobody waits
	}
	return st
}

// logregPart is one partition's learner: progressive validation (predict,
// then learn) on labelled events, prediction only on the others.
type logregPart struct {
	job     *logregJob
	index   int
	out     runtime.Emitter
	learner *learners.Learner
	prog    *learners.Progressive
	drift   *learners.PageHinkley // on the log loss of prog's events
	// driftEpoch is the job's drift-action count the detector started at.
	driftEpoch uint64
	msg        []byte
	lastSeq    uint64       // of the last record processed
	limit      int          // merge after this many labelled events within a group: γ (fault tolerance)
	unacked    atomic.Int64 // learned, not yet merged: published for status
	unlogged   int          // learned since the last merge and not in the item log
	active     bool         // has work, for the clock

	// pub is the copy of prog that readers see, refreshed every
	// publishEvery and whenever the partition goes idle.
	pub struct {
		sync.Mutex
		snap *learners.Progressive
		// remote: snap came from another node's delta (share.go) and
		// is newer than prog.
		remote bool
	}
	pubAt time.Time
	// validated is prog's count of labelled events as of the last
	// publish, for other partitions' drifts (drifts.noticed).
	validated atomic.Int64
	// committed is prog and drift as of the last merge into the global
	// model, which backups take (ft.go); under job.merge, nil until then.
	committed *partMetrics
	share     partShare
	// pend are the predictions waiting for delayed labels (labels.go).
	pend *pendingSet
}

const publishEvery = 100 * time.Millisecond

func (p *logregPart) Process(recs []runtime.Record, logged bool) {
	p.job.swap.RLock()
	defer p.job.swap.RUnlock()
	if !p.active {
		p.job.clock.SetActive(p.index, true)
		p.active = true
		p.share.busy, p.share.round = true, p.job.clock.Round(p.index)
		if p.job.sharing() {
			p.adoptMetrics()
		}
	}
	wants := p.out.Wants(TypePrediction)
	model := p.job.model
	// Backups need the held sets as of each merge, other nodes their
	// changes (labels_ft.go).
	p.pend.journaled = p.job.ft != nil || p.job.sharing()
	p.restartDetector()
	for i := range recs {
		r := &recs[i]
		if p.share.gapUpTo != 0 && !p.replayed(r.Seq) {
			continue
		}
		var prob float64
		p.lastSeq = r.Seq
		if i+1 < len(recs) {
			// The next event's cache misses overlap this one's arithmetic.
			p.learner.Prefetch(recs[i+1].Features)
		}
		if r.Side != 0 {
			// A held prediction or a delayed label: no event of its own.
			p.processDelayed(r, math.NaN())
			if !logged {
				p.unlogged++
			}
			continue
		}
		if r.Label >= 0 {
			prob = p.learn(r, r.Features, r.Label == 1, math.NaN())
			if !logged {
				p.unlogged++
			}
		} else {
			prob = model.Predict(r.Features)
			if len(r.Values) > 0 {
				p.processDelayed(r, prob)
			}
		}
		if wants {
			p.msg = AppendPrediction(p.msg[:0], p.out.Job(), r, prob, model.Version())
			p.out.Publish(TypePrediction, append([]byte(nil), p.msg...))
		}
	}
	p.unacked.Store(int64(p.learner.Pending()))
	p.pend.publish()
	if now := time.Now(); now.Sub(p.pubAt) >= publishEvery {
		p.publish(now)
	}
}

// learn learns one labelled event of features feats (r's, or those a
// delayed label joined) and scores served, the probability that was
// served for it, or the learner's own prediction when served is NaN; it
// returns the probability scored.
func (p *logregPart) learn(r *runtime.Record, feats []learners.Feature, label bool, served float64) float64 {
	p.landed()
	prob := p.learner.Learn(feats, label)
	if served == served {
		prob = served
	}
	p.prog.Observe(prob, label)
	p.observeDrift(r)
	if int64(len(feats)) > p.job.maxFeats.Load() {
		p.job.maxFeats.Store(int64(len(feats)))
	}
	if p.learner.Pending() >= p.limit {
		p.merge()
	}
	return prob
}

// Coordinate merges at the end of a group of batches, then waits for the
// other partitions as the job's consistency says.
func (p *logregPart) Coordinate() {
	if p.job.pacesRemote() {
		// The delta completes the round: other nodes' partitions wait
		// for it.
		p.share.round = p.job.clock.Round(p.index) + 1
		p.awaitLanded()
	}
	p.merge()
	p.job.clock.Advance(p.index)
}

// Idle merges without waiting: a partition without work holds no one back
// and waits for no one.
func (p *logregPart) Idle(final bool) time.Duration {
	if p.active {
		p.job.clock.SetActive(p.index, false)
		p.active = false
		p.share.busy = false
	}
	now := time.Now()
	if p.job.sharing() {
		// Metrics that changed go out within metricsEvery, and at the end.
		p.sendDelta(now, final)
		p.publish(now)
		return p.idleWait(now)
	}
	p.merge()
	p.unacked.Store(0)
	p.publish(now)
	return 0
}

// merge hands the partition's local updates to the global model: folds
// them in, or sends them as a delta in sharing mode (share.go).
func (p *logregPart) merge() {
	if p.job.sharing() {
		p.sendDelta(time.Now(), false)
	} else {
		p.mergeLocal()
	}
	if j := p.job; j.ft != nil {
		// γ: at most this many events learned and not yet merged.
		p.limit = max(j.ft.Gamma(), 1)
	}
}

// mergeLocal folds the partition's local updates into the global model
// (the parameter server's merge step) and lets fault tolerance decide on
// a backup. Unlabelled events change no state, but merging records that
// the model now covers them too.
func (p *logregPart) mergeLocal() {
	j := p.job
	j.merge.Lock()
	n := p.learner.Pending()
	if n == 0 && j.merge.lastSeqs[p.index] == p.lastSeq {
		j.merge.Unlock()
		return
	}
	if j.merge.tracker != nil {
		p.learner.SyncTracked(j.merge.tracker)
	} else {
		p.learner.Sync()
	}
	j.merge.lastSeqs[p.index] = p.lastSeq
	p.commitPending()
	if j.ft != nil {
		p.commitMetrics()
	}
	j.merge.learned += int64(n)
	if j.ft != nil {
		j.ft.Unit(0).Merged(n, p.unlogged, j.merge.learned)
	}
	p.unlogged = 0
	j.merge.Unlock()
}

// publish refreshes the metrics readers see, unless another node's are
// newer (share.go).
func (p *logregPart) publish(now time.Time) {
	p.pub.Lock()
	if !p.pub.remote {
		p.prog.CopyTo(p.pub.snap)
	}
	p.pub.Unlock()
	p.validated.Store(p.prog.Count())
	p.pubAt = now
}

// predictor answers predictions from a job's global model, for one
// request. Not safe for concurrent use.
type predictor struct {
	j     *logregJob
	arena runtime.Arena
	rec   runtime.Record
	last  float64 // the last probability served, for Held
}

// NewPredictor makes a predictor for one request (runtime.Predicting).
func (j *logregJob) NewPredictor() runtime.Predictor { return &predictor{j: j} }

// Predict reads one event (its label, if any, is checked and ignored) and
// returns the global model's probability.
func (p *predictor) Predict(v *fastjson.Value, line int) (runtime.Predicted, error) {
	if v.Type() != fastjson.TypeObject {
		return runtime.Predicted{}, &runtime.InputError{Line: line, Msg: fmt.Sprintf("an event must be a JSON object, got %s", v.Type())}
	}
	// Keys handed out stay in the arena; features are not kept.
	p.arena.ResetFeatures()
	p.rec = runtime.Record{}
	if err := p.j.Extract(v, &p.rec, &p.arena, time.Now().UnixMilli()); err != nil {
		return runtime.Predicted{}, runtime.AtLine(err, line)
	}
	p.j.swap.RLock()
	defer p.j.swap.RUnlock()
	p.last = p.j.model.Predict(p.rec.Features)
	out := runtime.Predicted{Key: messageKey(&p.rec), P: p.last}
	if len(p.rec.Values) > 0 {
		out.ID = p.rec.Values[0]
	}
	return out, nil
}

// Version is the global model's current version.
func (p *predictor) Version() uint64 { return p.j.model.Version() }

// ChartSeries are the model's series in its history: accuracy and log
// loss over the recent window and the whole run.
func (j *logregJob) ChartSeries() []string {
	return []string{"accuracy_recent", "accuracy_all", "log_loss_recent", "log_loss_all"}
}

func (j *logregJob) ChartValues(dst []float64) []float64 {
	m := j.metrics()
	acc := func(x learners.Measures) (accuracy, loss float64) {
		if x.Count == 0 {
			return math.NaN(), math.NaN()
		}
		return x.Accuracy, x.LogLoss
	}
	ra, rl := acc(m.Recent)
	aa, al := acc(m.All)
	return append(dst, ra, aa, rl, al)
}
