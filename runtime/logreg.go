package runtime

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/learners"
	"github.com/valyala/fastjson"
)

// logregJob is kind "logreg": online logistic regression, one Learner per
// partition over a shared global Model (learners' parameter-server
// design). Params: the learner's (hash_bits, optimizer, alpha, beta, l1,
// l2, clip, normalize, adaptive, window) and the field names. Partitions
// merge at the end of each group of batches (group.go), waiting for each
// other as the job's consistency says (consistency.go).
type logregJob struct {
	name   string
	fields Fields
	model  *learners.Model
	window int
	parts  []*logregPart
	ft     *jobFT // nil without fault tolerance
	// clock paces the partitions' merges: async, bsp or ssp.
	consistency string
	clock       *syncClock

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

	mu struct {
		sync.Mutex
		snap   learners.Snapshot // cached, refreshed at most every second
		snapAt time.Time
	}
}

func newLogregJob(spec Spec, p *Params) (kindJob, error) {
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
	if cfg.Normalize, err = p.String("normalize", cfg.Normalize, "none", "l2", "log1p_l2"); err != nil {
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
	fields, err := readFields(p)
	if err != nil {
		return nil, err
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		if pe, ok := err.(*learners.ParamError); ok {
			return nil, perr(pe.Param, "%s", pe.Msg)
		}
		return nil, err
	}
	model, err := learners.NewModel(cfg)
	if err != nil {
		return nil, err
	}
	staleness := map[string]int{ConsistencyAsync: math.MaxInt32, ConsistencyBSP: 0, ConsistencySSP: spec.Sync.Staleness}[spec.Sync.Consistency]
	return &logregJob{name: spec.Name, fields: fields, model: model, window: cfg.Window,
		consistency: spec.Sync.Consistency, clock: newSyncClock(spec.Partitions, staleness)}, nil
}

func (j *logregJob) extract(v *fastjson.Value, rec *Record, a *arena, now int64) error {
	var err error
	if rec.Key, err = extractKey(v, j.fields.Key, a); err != nil {
		return err
	}
	if rec.TS, err = extractTS(v, j.fields.TS, now); err != nil {
		return err
	}
	if rec.Label, err = extractLabel(v, j.fields.Label); err != nil {
		return err
	}
	start := len(a.feats)
	a.feats, err = appendFeatures(a.feats, v, j.fields.Features)
	rec.Features = a.feats[start:len(a.feats):len(a.feats)]
	return err
}

func (j *logregJob) newPartition(index int, out emitter) partitionOp {
	p := &logregPart{job: j, index: index, out: out, learner: j.model.NewLearner(), prog: learners.NewProgressive(j.window), limit: math.MaxInt}
	p.pub.snap = p.prog.Clone()
	j.parts = append(j.parts, p)
	j.merge.lastSeqs = append(j.merge.lastSeqs, 0)
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

func (j *logregJob) status(st *JobStatus, detail bool) {
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
	st.Model, st.Metrics = &snap, &m
	st.Consistency = j.clock.status(j.consistency)
	if j.consistency != ConsistencySSP {
		st.Consistency.Staleness = 0
	}
}

// logregPart is one partition's learner: progressive validation (predict,
// then learn) on labelled events, prediction only on the others.
type logregPart struct {
	job      *logregJob
	index    int
	out      emitter
	learner  *learners.Learner
	prog     *learners.Progressive
	msg      []byte
	lastSeq  uint64       // of the last record processed
	limit    int          // merge after this many labelled events within a group: γ (fault tolerance)
	unacked  atomic.Int64 // learned, not yet merged: published for status
	unlogged int          // learned since the last merge and not in the item log
	active   bool         // has work, for the clock

	// pub is the copy of prog that readers see, refreshed every
	// publishEvery and whenever the partition goes idle.
	pub struct {
		sync.Mutex
		snap *learners.Progressive
	}
	pubAt time.Time
}

const publishEvery = 100 * time.Millisecond

func (p *logregPart) process(recs []Record, logged bool) {
	if !p.active {
		p.job.clock.setActive(p.index, true)
		p.active = true
	}
	wants := p.out.hub.Wants(p.out.job, TypePrediction)
	model := p.job.model
	for i := range recs {
		r := &recs[i]
		var prob float64
		p.lastSeq = r.Seq
		if r.Label >= 0 {
			prob = p.learner.Learn(r.Features, r.Label == 1)
			p.prog.Observe(prob, r.Label == 1)
			if !logged {
				p.unlogged++
			}
			if int64(len(r.Features)) > p.job.maxFeats.Load() {
				p.job.maxFeats.Store(int64(len(r.Features)))
			}
			if p.learner.Pending() >= p.limit {
				p.merge()
			}
		} else {
			prob = model.Predict(r.Features)
		}
		if wants {
			p.msg = appendPrediction(p.msg[:0], p.out.job, r, prob, model.Version())
			p.out.hub.Publish(p.out.job, TypePrediction, append([]byte(nil), p.msg...))
		}
	}
	p.unacked.Store(int64(p.learner.Pending()))
	if now := time.Now(); now.Sub(p.pubAt) >= publishEvery {
		p.publish(now)
	}
}

// coordinate merges at the end of a group of batches, then waits for the
// other partitions as the job's consistency says.
func (p *logregPart) coordinate() {
	p.merge()
	p.job.clock.advance(p.index)
}

// idle merges without waiting: a partition without work holds no one back
// and waits for no one.
func (p *logregPart) idle(bool) time.Duration {
	if p.active {
		p.job.clock.setActive(p.index, false)
		p.active = false
	}
	p.merge()
	p.unacked.Store(0)
	p.publish(time.Now())
	return 0
}

// merge folds the partition's local updates into the global model (the
// parameter server's merge step) and lets fault tolerance decide on a
// backup. Unlabelled events change no state, but merging records that the
// model now covers them too.
func (p *logregPart) merge() {
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
	j.merge.learned += int64(n)
	if j.ft != nil {
		j.ft.units[0].merged(n, p.unlogged, j.merge.learned)
	}
	p.unlogged = 0
	j.merge.Unlock()
	if j.ft != nil {
		// γ: at most this many events learned and not yet merged.
		p.limit = max(j.ft.gamma(), 1)
	}
}

func (p *logregPart) publish(now time.Time) {
	c := p.prog.Clone()
	p.pub.Lock()
	p.pub.snap = c
	p.pub.Unlock()
	p.pubAt = now
}

// appendPrediction encodes a prediction message without reflection: this
// runs once per event while someone watches.
func appendPrediction(b []byte, job string, r *Record, p float64, version uint64) []byte {
	b = append(b, `{"type":"prediction","job":`...)
	b = appendJSONString(b, job)
	b = append(b, `,"key":`...)
	b = appendJSONString(b, r.Key)
	b = append(b, `,"p":`...)
	b = strconv.AppendFloat(b, p, 'g', 6, 64)
	if r.Label >= 0 {
		b = append(b, `,"label":`...)
		b = strconv.AppendInt(b, int64(r.Label), 10)
	}
	b = append(b, `,"model_version":`...)
	b = strconv.AppendUint(b, version, 10)
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, r.TS, 10)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, r.Seq, 10)
	return append(b, '}')
}

// ErrNotSupported is returned for an operation the job's kind lacks.
var ErrNotSupported = errors.New("runtime: not supported by this job's kind")

// Predicted is one answer of a Predictor.
type Predicted struct {
	Key string  `json:"key,omitempty"`
	P   float64 `json:"p"`
}

// Predictor answers predictions from a job's global model, for one
// request. Not safe for concurrent use.
type Predictor struct {
	j     *logregJob
	arena arena
	rec   Record
}

// Predictor returns a predictor for a logreg job.
func (j *Job) Predictor() (*Predictor, error) {
	lj, err := kindAs[*logregJob](j, "predictions", "logreg")
	if err != nil {
		return nil, err
	}
	return &Predictor{j: lj}, nil
}

// Predict reads one event (its label, if any, is checked and ignored) and
// returns the global model's probability.
func (p *Predictor) Predict(v *fastjson.Value, line int) (Predicted, error) {
	if v.Type() != fastjson.TypeObject {
		return Predicted{}, &InputError{Line: line, Msg: fmt.Sprintf("an event must be a JSON object, got %s", v.Type())}
	}
	// Keys handed out stay in the arena; features are not kept.
	p.arena.feats = p.arena.feats[:0]
	if err := p.j.extract(v, &p.rec, &p.arena, 0); err != nil {
		return Predicted{}, inputError(err, line)
	}
	return Predicted{Key: p.rec.Key, P: p.j.model.Predict(p.rec.Features)}, nil
}

// Version is the global model's current version.
func (p *Predictor) Version() uint64 { return p.j.model.Version() }

// ModelView is the body of GET /v1/jobs/{job}/model.
type ModelView struct {
	Job string `json:"job"`
	learners.Snapshot
	Metrics learners.Metrics `json:"metrics"`
}

// Model returns a snapshot of a logreg job's global model; with weights,
// the limit largest non-zero weights (limit <= 0: all).
func (j *Job) Model(weights bool, limit int) (ModelView, error) {
	lj, err := kindAs[*logregJob](j, "a model", "logreg")
	if err != nil {
		return ModelView{}, err
	}
	return ModelView{Job: j.spec.Name, Snapshot: lj.model.Snapshot(weights, limit), Metrics: lj.metrics()}, nil
}
