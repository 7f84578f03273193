package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mlstream/mlstream/ft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fastjson"
)

// The seam between the engine and the job kinds. A kind lives in its own
// package, implements Instance (and Operator for its partitions), declares
// itself with a Kind and calls Register once, from its init. The engine
// never names a kind: what differs between kinds is in the Kind value or
// behind the optional interfaces below, which the engine finds by type
// assertion (as database/sql does with its drivers).

// Kind declares a job kind to the engine.
type Kind struct {
	// Name is the value of a spec's kind field.
	Name string
	// New reads the kind's params from p (each read names its param in
	// errors; params nobody read are refused after New) and returns the
	// job's state. spec is validated: partitions and queue size are set.
	New func(spec Spec, p *Params) (Instance, error)
	// Memory estimates the bytes of the job's state at its largest, before
	// anything is allocated, reading params with the ranges New uses, and
	// names the spec field that weighs most. nil: no state to speak of.
	Memory func(spec Spec, p *Params, withFT bool) (bytes int64, field string, err error)
	// TwoStreams says the job reads spec.Left and spec.Right (an event
	// learns its side from the stream, Record.Side 0 or 1) instead of
	// spec.Input.
	TwoStreams bool
	// Divergence is the default of ft.max_divergence (Θ), in the kind's
	// unit of state divergence.
	Divergence float64
	// Shed says how load shedding drops the kind's events; nil when the
	// kind cannot shed without biasing its results.
	Shed *ShedPolicy
	// Consistent says the kind has consistency rounds (SyncClock), so
	// that sync.consistency bsp and ssp apply to it.
	Consistent bool
	// Spreadable says the events of one key may go to several partitions
	// (spec.Spread): the kind's partitions merge into what queries answer
	// (a model, counters, sketches), so a hot key can be shared out. A
	// join cannot: its matches need every tuple of a key in one partition.
	Spreadable bool
	// Messages are the hub message types the kind's jobs publish.
	Messages []string
	// Describe sends the descriptors of the kind's Prometheus series, for
	// jobs that implement Collecting. nil: none.
	Describe func(ch chan<- *prometheus.Desc)
}

// ShedPolicy is what load shedding may drop of a kind's events.
type ShedPolicy struct {
	// Drops says what is dropped, for the job status.
	Drops string
	// Sheddable reports whether shedding may drop r; nil: every event.
	Sheddable func(r *Record) bool
	// Reweight keeps each kept event with weight w/p in Record.Value
	// (w its weight so far, 0 meaning 1; randomized rounding, so counts
	// stay unbiased integers).
	Reweight bool
}

func (s *ShedPolicy) sheddable(r *Record) bool { return s.Sheddable == nil || s.Sheddable(r) }

// Instance is one job of a kind: what every kind implements.
type Instance interface {
	// Extract fills rec from one event. a is scratch memory for the
	// record's slices and strings, shared by the records of one request.
	// now is the arrival time in epoch ms (for events without a time).
	// Errors made with BadField name the field.
	Extract(v *fastjson.Value, rec *Record, a *Arena, now int64) error
	// NewPartition makes the operator of partition index; out reaches
	// the hub.
	NewPartition(index int, out Emitter) Operator
	// Status is the kind's section of the job status: a value that
	// encodes as a JSON object, whose fields join the status's top
	// level (JobStatus.Section). detail asks for costly extras.
	Status(detail bool) any
	// Queries are the kind's named queries (GET /v1/jobs/{job}/query/{name}).
	Queries() []Query
}

// Operator is one partition's operator, called only from its
// partition's goroutine.
type Operator interface {
	// Process handles one batch, in order; logged says whether the batch
	// is in the item log (fault tolerance counts what is at risk).
	Process(recs []Record, logged bool)
	// Coordinate is called at the end of each group of batches (group.go):
	// the moment to merge into a global view or publish state for queries.
	Coordinate()
	// Idle is called whenever the queue runs empty, and once at shutdown
	// after the last batch (final): the moment to flush or merge. An
	// operator that puts work off returns how soon it wants to be called
	// again.
	Idle(final bool) (again time.Duration)
}

// Query is one named query of a kind.
type Query struct {
	Name string
	// Params are the URL query parameters it accepts; others are refused.
	Params []string
	Run    func(q QueryArgs) (any, error)
}

// QueryArgs are a query's arguments.
type QueryArgs struct {
	Job    string     // the job's name
	Params url.Values // the URL's query parameters
	Path   string     // the request's path, for links to further pages
}

// QueryError is a bad query parameter (answered with 400 naming it).
type QueryError struct {
	Field string
	Msg   string
}

func (e *QueryError) Error() string { return e.Msg }

// ErrUnknownQuery is a query the job's kind does not have.
var ErrUnknownQuery = errors.New("runtime: no such query")

// ErrNotSupported is returned for an operation the job's kind lacks.
var ErrNotSupported = errors.New("runtime: not supported by this job's kind")

// Optional capabilities of an Instance.
type (
	// Predicting answers predictions (POST /v1/jobs/{job}/predict).
	Predicting interface {
		// NewPredictor returns a predictor for one request.
		NewPredictor() Predictor
	}
	// Announcing publishes what changed at most once a second, when the
	// engine samples its jobs.
	Announcing interface {
		Announce(out Emitter, now time.Time)
	}
	// Charting has series of its own in the job's history (GET
	// /v1/jobs/{job}/history: the charts a page opened late draws at
	// once), sampled once a second with the engine's: ChartSeries names
	// them, and never changes; ChartValues appends their values now, in
	// that order (NaN for one that has none yet).
	Charting interface {
		ChartSeries() []string
		ChartValues(dst []float64) []float64
	}
	// Collecting sends the job's own Prometheus series (described by
	// Kind.Describe), labelled with the job's name.
	Collecting interface {
		Collect(job string, ch chan<- prometheus.Metric)
	}
	// ShedAware is told the job's shedding totals, to widen its bounds.
	ShedAware interface {
		SetShed(t ShedTotals)
	}
	// FaultTolerant has units of state that fault tolerance backs up:
	// one holding every partition's events (a global model), or one per
	// partition (AF-Stream's n operator copies).
	FaultTolerant interface {
		Units() []Unit
		// SetFT hands the kind its job's fault tolerance, before recovery;
		// unit i of Units() is f.Unit(i).
		SetFT(f FT)
	}
	// Unacking reports, per partition, the events it processed and did
	// not yet hand to the job's global state (Γ's count).
	Unacking interface {
		Unacked(partition int) int64
	}
	// Sharing is a kind whose partitions fold into one global state (a
	// model) by additive deltas. In cluster mode its partitions run on
	// several nodes: each partition's merge hands its delta to send
	// instead of folding it in, the cluster puts every delta of the job in
	// one order (a JetStream stream), and every node applies all of them
	// in that order with ApplyDelta, so every node holds the same global
	// state at the same version.
	Sharing interface {
		// ShareDeltas switches the job to shared deltas; called once,
		// before the partitions start. send is called on the partition's
		// goroutine with the updates merged since its previous send and
		// the sequence number of the last event they hold; it returns an
		// error when the delta could not be made durable (the partition is
		// being fenced off or the cluster is down), and the kind then
		// keeps nothing of it: the events are replayed by whoever owns the
		// partition next.
		ShareDeltas(send func(partition int, lastSeq uint64, delta []byte) error)
		// ApplyDelta folds one delta into the global state; version is its
		// position in the cluster's order and becomes the state's version.
		// Called from one goroutine at a time.
		ApplyDelta(delta []byte, version uint64) error
	}
	// PartitionResetting is a Sharing kind that can forget what one
	// partition learned after a point: a node taking partition p over
	// (again) resumes its events after lastSeq, the last event the shared
	// state holds, so anything the partition kept of later events would
	// be counted twice. Called on the partition's goroutine (Job.Do).
	PartitionResetting interface {
		ResetPartition(p int, lastSeq uint64)
	}
)

// Predicted is one answer of a Predictor.
type Predicted struct {
	Key string `json:"key,omitempty"`
	// ID is the event's id when the prediction is held for a delayed
	// label (Holding).
	ID string  `json:"id,omitempty"`
	P  float64 `json:"p"`
}

// Predictor answers predictions for one request; not safe for concurrent
// use.
type Predictor interface {
	// Predict reads one event (line is its place in the request, for
	// errors) and returns the prediction.
	Predict(v *fastjson.Value, line int) (Predicted, error)
	// Version is the model's current version.
	Version() uint64
}

// ShedTotals are a job's load-shedding totals.
type ShedTotals interface {
	// Totals are the events shed and the weight added to kept events.
	Totals() (shed, extra uint64)
}

// Unit is one unit of state under fault tolerance: ft.Stateful plus what
// the engine needs to know of its events. A unit may also implement
// LiveDiverging, Compensating and Serialising.
type Unit interface {
	ft.Stateful
	// Partitions are the partitions whose events the state holds.
	Partitions() []int
	// StateSeqs returns, for each of Partitions(), the sequence number of
	// the last event folded into the state that a backup would capture.
	StateSeqs() []uint64
	// Alpha is the most one event can move the state divergence.
	Alpha() float64
	// Recovered is called once the backup chain is applied (or none
	// was): the state holds the events up to seqs, per Partitions().
	Recovered(seqs []uint64)
}

type (
	// LiveDiverging reports the divergence for the status, from outside
	// the partition goroutine.
	LiveDiverging interface{ LiveDivergence() float64 }
	// Compensating widens the unit's reported bounds after a recovery:
	// theta is the divergence it may have lost, lost the events of its
	// partitions that are gone.
	Compensating interface {
		Compensate(theta float64, lost int64)
	}
	// Serialising is a unit of several partitions that lets the engine
	// back it up outside a Merged call: WithState runs fn serialised
	// with the kind's changes to the state (its merges), as Merged is. A
	// unit of one partition needs none (its goroutine calls); without
	// it, a unit of several is backed up only from Merged.
	Serialising interface{ WithState(fn func()) }
)

// FT is a job's fault tolerance as its kind sees it.
type FT interface {
	Unit(i int) FTUnit
	// Gamma is Γ's share per partition: merge after this many events.
	Gamma() int
}

// FTUnit is one unit's backups, as its kind drives them.
type FTUnit interface {
	// Merged is called after events were folded into the unit, unlogged
	// of them not in the item log, serialised with the kind's other
	// changes to it; processed is the unit's running total. It may take a
	// backup.
	Merged(events, unlogged int, processed int64)
	// Due says whether Merged would back up now, for kinds that change
	// their state event by event.
	Due(div float64, atRisk int) bool
	// WindowEnded backs the unit up at the end of an event-time window and
	// resets its thresholds.
	WindowEnded()
}

// Emitter is how a job's operators reach the hub. A partition's emitter
// knows its partition, so that a cluster node can fence its outputs with
// the partition's owner token (Tap).
type Emitter struct {
	hub *Hub
	job string
	// slot is the partition index + 1; 0 (the zero value) is a job-level
	// emitter (Announce, stats).
	slot int
}

// Job is the job's name.
func (e Emitter) Job() string { return e.job }

// Partition is the emitter's partition index, -1 for a job-level one.
func (e Emitter) Partition() int { return e.slot - 1 }

// Wants reports whether anyone subscribes to the job's messages of typ:
// build messages only then.
func (e Emitter) Wants(typ string) bool { return e.hub.Wants(e.job, typ) }

// Publish sends msg, which must not be modified afterwards.
func (e Emitter) Publish(typ string, msg []byte) { e.hub.PublishFrom(e.job, typ, e.slot-1, msg) }

// Envelope starts a message of type typ at time ts (epoch ms).
func (e Emitter) Envelope(typ string, ts int64) Envelope {
	return Envelope{Type: typ, Job: e.job, TS: ts}
}

// PublishValue encodes msg, a message type that embeds Envelope, with
// encoding/json and publishes it: for messages of at most one a second.
func (e Emitter) PublishValue(msg interface{ envelope() Envelope }) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	e.Publish(msg.envelope().Type, b)
	return nil
}

// The registry of kinds, filled by Register from the kinds' init.
var registry = struct {
	sync.RWMutex
	m map[string]*Kind
}{m: map[string]*Kind{}}

// Register adds a kind. It panics on a kind without a name or
// constructor, and on a name taken: both are programming errors.
func Register(k Kind) {
	if k.Name == "" || k.New == nil {
		panic("runtime: Register: a kind needs a name and a constructor")
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.m[k.Name]; dup {
		panic("runtime: Register: kind " + k.Name + " registered twice")
	}
	registry.m[k.Name] = &k
}

func lookupKind(name string) (*Kind, bool) {
	registry.RLock()
	defer registry.RUnlock()
	k, ok := registry.m[name]
	return k, ok
}

func registered() []*Kind {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]*Kind, 0, len(registry.m))
	for _, k := range registry.m {
		out = append(out, k)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// Kinds lists the job kinds registered, sorted.
func Kinds() []string {
	var out []string
	for _, k := range registered() {
		out = append(out, k.Name)
	}
	return out
}

// kindsWhere lists the kinds for which f holds.
func kindsWhere(f func(*Kind) bool) string {
	var out []string
	for _, k := range registered() {
		if f(k) {
			out = append(out, k.Name)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// OutputTypes lists the message types of the WebSocket feed: the engine's
// and those of the registered kinds.
func OutputTypes() []string {
	out := slices.Clone(engineTypes)
	for _, k := range registered() {
		for _, t := range k.Messages {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return out
}

// Query runs the job's query name with the URL's parameters, refusing
// parameters the query does not know with a QueryError.
func (j *Job) Query(name string, params url.Values, path string) (any, error) {
	q, err := j.findQuery(name)
	if err != nil {
		return nil, err
	}
	if err := q.checkParams(params); err != nil {
		return nil, err
	}
	return q.Run(QueryArgs{Job: j.spec.Name, Params: params, Path: path})
}

// findQuery is the kind's query name, or ErrUnknownQuery listing those
// it has.
func (j *Job) findQuery(name string) (*Query, error) {
	var names []string
	for _, q := range j.kind.instance().Queries() {
		if q.Name == name {
			return &q, nil
		}
		names = append(names, q.Name)
	}
	has := "has no queries"
	if len(names) > 0 {
		has = fmt.Sprintf("has no query %q; its queries: %s", name, strings.Join(names, ", "))
	}
	return nil, fmt.Errorf("%w: job %q of kind %q %s", ErrUnknownQuery, j.spec.Name, j.spec.Kind, has)
}

// checkParams refuses the first parameter, in order, that q does not take.
func (q *Query) checkParams(params url.Values) error {
	var unknown []string
	for p := range params {
		if !slices.Contains(q.Params, p) {
			unknown = append(unknown, p)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	known := "none"
	if len(q.Params) > 0 {
		known = strings.Join(q.Params, ", ")
	}
	return &QueryError{Field: unknown[0], Msg: fmt.Sprintf("unknown query parameter %q for query %s; known: %s", unknown[0], q.Name, known)}
}

// Predictor returns a predictor for one request, or ErrNotSupported when
// the job's kind does not predict.
func (j *Job) Predictor() (Predictor, error) {
	pk, ok := j.kind.instance().(Predicting)
	if !ok {
		return nil, fmt.Errorf("%w: job %q is of kind %q, which does not predict", ErrNotSupported, j.spec.Name, j.spec.Kind)
	}
	return pk.NewPredictor(), nil
}

// kindJob is the engine's view of a job's kind: its Instance and its
// Kind, with the hooks the engine's own files call.
type kindJob interface {
	extract(v *fastjson.Value, rec *Record, a *arena, now int64) error
	unacked(partition int) int64
	instance() Instance
	def() *Kind
	// fields are the event fields the job names (Params.Field).
	fields() []string
}

type kindAdapter struct {
	in          Instance
	kind        *Kind
	eventFields []string
}

func (k *kindAdapter) fields() []string { return k.eventFields }

func (k *kindAdapter) instance() Instance { return k.in }
func (k *kindAdapter) def() *Kind         { return k.kind }

func (k *kindAdapter) extract(v *fastjson.Value, rec *Record, a *arena, now int64) error {
	return k.in.Extract(v, rec, a, now)
}

func (k *kindAdapter) unacked(i int) int64 {
	if u, ok := k.in.(Unacking); ok {
		return u.Unacked(i)
	}
	return 0
}

// ftAdapter gives fault tolerance a kind's units of state.
type ftAdapter struct {
	k    FaultTolerant
	list []*unitAdapter
}

func newFTAdapter(k FaultTolerant) *ftAdapter {
	a := &ftAdapter{k: k}
	for _, u := range k.Units() {
		a.list = append(a.list, &unitAdapter{Unit: u})
	}
	return a
}

func (a *ftAdapter) units() []stateful {
	out := make([]stateful, len(a.list))
	for i, u := range a.list {
		out[i] = u
	}
	return out
}

func (a *ftAdapter) setFT(f *jobFT) { a.k.SetFT(ftHandle{f}) }

// unitAdapter is a kind's Unit under the methods ftjob.go and
// ftrecover.go call.
type unitAdapter struct{ Unit }

func (u *unitAdapter) partitions() []int       { return u.Partitions() }
func (u *unitAdapter) stateSeqs() []uint64     { return u.StateSeqs() }
func (u *unitAdapter) alpha() float64          { return u.Alpha() }
func (u *unitAdapter) recovered(seqs []uint64) { u.Recovered(seqs) }

func (u *unitAdapter) liveDivergence() float64 {
	if l, ok := u.Unit.(LiveDiverging); ok {
		return l.LiveDivergence()
	}
	return 0
}

// withState runs fn at once for a unit of one partition, whose goroutine
// alone changes it; a unit of several runs it under the kind's
// serialisation (Serialising), or not at all.
func (u *unitAdapter) withState(fn func()) {
	if s, ok := u.Unit.(Serialising); ok {
		s.WithState(fn)
	} else if len(u.Partitions()) == 1 {
		fn()
	}
}

func (u *unitAdapter) compensate(theta float64, lost int64) {
	if c, ok := u.Unit.(Compensating); ok {
		c.Compensate(theta, lost)
	}
}

// ftHandle is FT over a job's jobFT.
type ftHandle struct{ f *jobFT }

func (h ftHandle) Unit(i int) FTUnit { return unitHandle{h.f.units[i]} }
func (h ftHandle) Gamma() int        { return h.f.gamma() }

type unitHandle struct{ u *stateUnit }

func (h unitHandle) Merged(events, unlogged int, processed int64) {
	h.u.merged(events, unlogged, processed)
}
func (h unitHandle) Due(div float64, atRisk int) bool { return h.u.due(div, atRisk) }
func (h unitHandle) WindowEnded()                     { h.u.windowEnded() }

// newKindJob makes the kind's Instance for spec and refuses the params
// it did not read.
func newKindJob(spec Spec) (kindJob, error) {
	k, ok := lookupKind(spec.Kind)
	if !ok {
		return nil, &SpecError{"kind", fmt.Sprintf("unknown kind %q; one of %s", spec.Kind, strings.Join(Kinds(), ", "))}
	}
	p := newParams(spec.Params)
	in, err := k.New(spec, p)
	if err != nil {
		return nil, err
	}
	if err := p.Done(); err != nil {
		return nil, err
	}
	return &kindAdapter{in: in, kind: k, eventFields: p.fields}, nil
}

// partitionOp is a partition's Operator under the names the engine's
// files call.
type partitionOp interface {
	process(recs []Record, logged bool)
	coordinate()
	idle(final bool) time.Duration
}

type opAdapter struct{ Operator }

func (o opAdapter) process(recs []Record, logged bool) { o.Process(recs, logged) }
func (o opAdapter) coordinate()                        { o.Coordinate() }
func (o opAdapter) idle(final bool) time.Duration      { return o.Idle(final) }

// QueryInt reads an optional integer query parameter in [lo, hi].
func QueryInt(q url.Values, name string, def, lo, hi int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, &QueryError{Field: name, Msg: fmt.Sprintf("%s must be an integer in [%d, %d], got %q", name, lo, hi, v)}
	}
	return n, nil
}

// QueryBool reads an optional boolean query parameter.
func QueryBool(q url.Values, name string, def bool) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, &QueryError{Field: name, Msg: name + " must be true or false"}
	}
	return b, nil
}

// Windows of a query of a windowed kind.
const (
	WindowCurrent = "current"
	WindowLast    = "last"
	WindowAll     = "all"
)

// ErrBadWindow is a query for a window that is not current, last or all.
var ErrBadWindow = fmt.Errorf("runtime: window must be %s, %s or %s", WindowCurrent, WindowLast, WindowAll)

// QueryWindow reads the optional query parameter window: current (the
// default), last or all.
func QueryWindow(q url.Values) (string, error) {
	switch w := q.Get("window"); w {
	case "":
		return WindowCurrent, nil
	case WindowCurrent, WindowLast, WindowAll:
		return w, nil
	}
	return "", &QueryError{Field: "window", Msg: ErrBadWindow.Error()}
}
