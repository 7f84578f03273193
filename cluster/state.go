package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/cluster/natsnode"
	"github.com/mlstream/mlstream/runtime"
	"github.com/nats-io/nats.go/jetstream"
)

// A unit's backup in the cluster is one entry of the state bucket: a
// JSON header line, then the state as the kind's BackupState wrote it
// (full). States larger than inlineMax go to the object store and the
// entry holds their name. Every write is a compare-and-swap on the
// entry's revision: a new owner rewrites the entry with its token when it
// takes the partition over, so an old owner's next write fails and it
// learns that it was fenced off.

// stateHeader says what a backup holds.
type stateHeader struct {
	Token   uint64    `json:"token"` // the fencing token of the partition's current owner
	Node    string    `json:"node"`  // the node that wrote the state (the last backup)
	Created time.Time `json:"created"`
	// Released is set by an owner's last backup before a graceful hand-off.
	Released bool `json:"released,omitempty"`
	// Rec is the sequence number of the last event of the partition the
	// state holds; Resume the log position (stream sequence) to replay
	// from, Skip how many events of that message the state holds already.
	Rec    uint64 `json:"rec,omitempty"`
	Resume uint64 `json:"resume,omitempty"`
	Skip   int    `json:"skip,omitempty"`
	// Version is, for a global unit, the delta stream's sequence the
	// state holds.
	Version    uint64   `json:"version,omitempty"`
	Seqs       []uint64 `json:"seqs,omitempty"`
	Divergence float64  `json:"divergence"`
	Bytes      int      `json:"bytes"`
	Object     string   `json:"object,omitempty"` // the state's object, when not inline
	Empty      bool     `json:"empty,omitempty"`  // a take-over record: no state
	// damaged, set by fence, says that the latest entry did not decode and
	// what was restored instead.
	damaged string
}

// inlineMax is the largest state kept in the KV entry itself.
const inlineMax = 512 << 10

// bucketObjects holds the states too large for a KV entry.
const bucketObjects = "mls_backups"

func encodeState(h stateHeader, state []byte) []byte {
	hb, _ := json.Marshal(h)
	out := make([]byte, 0, len(hb)+1+len(state))
	out = append(append(hb, '\n'), state...)
	return out
}

func decodeState(v []byte) (stateHeader, []byte, error) {
	var h stateHeader
	i := bytes.IndexByte(v, '\n')
	if i < 0 {
		return h, nil, errors.New("cluster: state entry without a header")
	}
	if err := json.Unmarshal(v[:i], &h); err != nil {
		return h, nil, fmt.Errorf("cluster: state header: %w", err)
	}
	return h, v[i+1:], nil
}

var errFenced = errors.New("cluster: fenced off: another node owns this partition now")

// stateStore reads and writes the state bucket with fencing.
type stateStore struct {
	n       *Node
	objects jetstream.ObjectStore
}

// fence makes key this token's: it returns the state found (nil when
// none) and the revision to write over next. A token lower than the
// entry's means this node is the stale one.
func (s *stateStore) fence(ctx context.Context, key string, token uint64) (h stateHeader, state []byte, rev uint64, err error) {
	for {
		var e stateEntry
		e, err = s.latest(ctx, key)
		mark := stateHeader{Token: token, Node: s.n.cfg.Node, Created: time.Now().UTC(), Empty: true}
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			err = natsnode.RetryEach(ctx, callWait, func(ctx context.Context) error {
				var err error
				rev, err = s.n.state.Create(ctx, key, encodeState(mark, nil))
				return err
			})
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			return h, nil, rev, err
		}
		if err != nil {
			return h, nil, 0, err
		}
		h, state, err = s.n.stateOf(ctx, e.value)
		if undecodable(e.value, err) {
			// Retrying cannot help: an older backup, or nothing (the
			// retained stream is replayed), and the take-over goes on.
			h, state = s.olderState(ctx, key, e.rev, err)
			err = nil
		}
		if err != nil {
			return h, nil, 0, err
		}
		if h.Token > token {
			return h, nil, 0, errFenced
		}
		// The take-over record keeps the position: a node that takes over
		// before this one wrote a backup resumes from the same place.
		// Node stays the last writer of a backup: a take-over record
		// fences, it does not make this node the state's author.
		nh := h
		nh.Token, nh.Released = token, false
		nh.Empty = nh.Empty || state == nil
		// A retried Update whose first try was stored fails on the
		// revision: the loop then finds its own mark and writes again.
		err = natsnode.RetryEach(ctx, callWait, func(ctx context.Context) error {
			var err error
			rev, err = s.n.state.Update(ctx, key, encodeState(nh, inlineOf(h, state)), e.rev)
			return err
		})
		if isWrongRevision(err) {
			continue
		}
		return h, state, rev, err
	}
}

// undecodable says whether reading the state entry value failed with err
// for good: the entry does not decode, or its state's object is gone.
// Other errors (a call that failed) are worth a retry.
func undecodable(value []byte, err error) bool {
	if err == nil {
		return false
	}
	_, _, derr := decodeState(value)
	return derr != nil || errors.Is(err, jetstream.ErrObjectNotFound)
}

// olderState is what a take-over restores when key's latest entry, of
// revision rev, does not decode (why): the newest older revision the
// bucket keeps that does, or else nothing, and the partition's state is
// rebuilt by replaying its retained stream from the start. h.damaged says
// which.
func (s *stateStore) olderState(ctx context.Context, key string, rev uint64, why error) (h stateHeader, state []byte) {
	bad := fmt.Sprintf("the backup %s (revision %d) does not decode: %v", key, rev, why)
	if hist, err := s.n.state.History(ctx, key); err == nil {
		for i := len(hist) - 1; i >= 0; i-- {
			en := hist[i]
			if en.Revision() >= rev || en.Operation() != jetstream.KeyValuePut {
				continue
			}
			if h, state, err := s.n.stateOf(ctx, en.Value()); err == nil && state != nil {
				h.damaged = fmt.Sprintf("%s; restored the older backup of revision %d", bad, en.Revision())
				return h, state
			}
		}
	}
	h.damaged = bad + "; no older backup does: the state is rebuilt by replaying what the stream retains"
	return h, nil
}

// inlineOf is what a rewritten entry carries: the state itself when it
// was inline, nothing when it lives in an object (the name stays).
func inlineOf(h stateHeader, state []byte) []byte {
	if h.Object != "" {
		return nil
	}
	return state
}

// write stores a backup over revision rev and returns the new revision;
// errFenced when the entry changed meanwhile (a new owner fenced it).
func (s *stateStore) write(ctx context.Context, key string, rev uint64, h stateHeader, state []byte) (uint64, error) {
	h.Bytes = len(state)
	body := state
	var object string
	if len(state) > inlineMax {
		object = key + "." + strconv.FormatUint(h.Token, 10) + "." + strconv.FormatInt(h.Created.UnixNano(), 36)
		if err := natsnode.RetryEach(ctx, callWait, func(ctx context.Context) error {
			_, err := s.objects.PutBytes(ctx, object, state)
			return err
		}); err != nil {
			return rev, err
		}
		h.Object, body = object, nil
	}
	var newRev uint64
	tries := 0
	err := natsnode.RetryEach(ctx, callWait, func(ctx context.Context) error {
		tries++
		var err error
		newRev, err = s.n.state.Update(ctx, key, encodeState(h, body), rev)
		return err
	})
	if isWrongRevision(err) && tries > 1 {
		// An earlier try may have been stored with its answer lost.
		newRev, err = s.ownWrite(ctx, key, h, err)
	}
	if isWrongRevision(err) {
		if object != "" {
			_ = s.objects.Delete(ctx, object)
		}
		return rev, errFenced
	}
	return newRev, err
}

// ownWrite returns the revision of key when its latest entry is the
// backup h (this write's own, stored by a try whose answer was lost),
// else orig.
func (s *stateStore) ownWrite(ctx context.Context, key string, h stateHeader, orig error) (uint64, error) {
	e, err := s.latest(ctx, key)
	if err != nil {
		return 0, err // not known: a failed write, not a fenced one
	}
	got, _, err := decodeState(e.value)
	if err != nil || got.Token != h.Token || !got.Created.Equal(h.Created) || got.Node != h.Node {
		return 0, orig
	}
	return e.rev, nil
}

// latest is key's entry as the bucket's leader has it, each try bounded
// by callWait and retried while ctx lasts (ErrKeyNotFound when none).
func (s *stateStore) latest(ctx context.Context, key string) (e stateEntry, err error) {
	err = natsnode.RetryEach(ctx, callWait, func(ctx context.Context) error {
		e, err = s.n.leaderGet(ctx, key)
		return err
	})
	return e, err
}

// read returns a unit's latest backup (ok false when there is none).
func (s *stateStore) read(ctx context.Context, key string) (h stateHeader, state []byte, ok bool, err error) {
	e, err := s.latest(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return h, nil, false, nil
	}
	if err != nil {
		return h, nil, false, err
	}
	h, state, err = s.n.stateOf(ctx, e.value)
	return h, state, err == nil && state != nil, err
}

// stateOf decodes an entry of the state bucket: its header and its state,
// fetched from the object store when it lives there; nil for a take-over
// record that holds none.
func (n *Node) stateOf(ctx context.Context, value []byte) (stateHeader, []byte, error) {
	h, state, err := decodeState(value)
	switch {
	case err != nil || h.Empty:
		return h, nil, err
	case h.Object != "":
		if state, err = n.objects.GetBytes(ctx, h.Object); err != nil {
			return h, nil, fmt.Errorf("cluster: state object %s: %w", h.Object, err)
		}
	}
	return h, state, nil
}

// stateEntry is a state bucket entry as its stream's leader has it.
type stateEntry struct {
	value []byte
	rev   uint64
}

// leaderGet reads key's entry from the state bucket's stream leader. A
// KV Get may be answered by any replica, and one that fell behind (back
// from a partition, catching up) answers with old states for a while:
// views installed from it, and take-overs restored from it, would be
// stale. The leader's answer is the latest committed entry.
func (n *Node) leaderGet(ctx context.Context, key string) (stateEntry, error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": "$KV." + bucketState + "." + key})
	m, err := n.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+bucketState, req)
	if err != nil {
		return stateEntry{}, err
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Seq  uint64 `json:"seq"`
			Data []byte `json:"data"`
			Hdrs []byte `json:"hdrs"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return stateEntry{}, err
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == int(jetstream.JSErrCodeMessageNotFound):
		return stateEntry{}, jetstream.ErrKeyNotFound
	case resp.Error != nil:
		return stateEntry{}, &jetstream.APIError{Code: resp.Error.Code, ErrorCode: jetstream.ErrorCode(resp.Error.ErrCode),
			Description: resp.Error.Description}
	case resp.Message == nil:
		return stateEntry{}, jetstream.ErrInvalidJetStreamResponse
	case bytes.Contains(resp.Message.Hdrs, []byte("KV-Operation")):
		return stateEntry{}, jetstream.ErrKeyNotFound // deleted or purged
	}
	return stateEntry{value: resp.Message.Data, rev: resp.Message.Seq}, nil
}

func isWrongRevision(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		return true
	}
	return errors.Is(err, jetstream.ErrKeyExists)
}

// stateWriter writes backups off the partitions' goroutines: per key the
// latest snapshot wins, and writes of one key are never concurrent.
type stateWriter struct {
	n    *Node
	mu   sync.Mutex
	next map[string]*writeReq
	wake chan struct{}
	done chan struct{}
}

type writeReq struct {
	key   string
	hdr   stateHeader
	state []byte
	rev   func() uint64       // the revision to write over
	ok    func(newRev uint64) // after a write
	fail  func(fenced bool)   // after a failed one
	then  chan error          // for a synchronous write (may be nil)
	valid func() bool         // still owned with this token
}

func newStateWriter(n *Node) *stateWriter {
	w := &stateWriter{n: n, next: map[string]*writeReq{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.loop()
	return w
}

func (w *stateWriter) submit(r *writeReq) {
	w.mu.Lock()
	if old := w.next[r.key]; old != nil && old.then != nil {
		old.then <- errors.New("cluster: superseded by a newer backup")
	}
	w.next[r.key] = r
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *stateWriter) loop() {
	defer close(w.done)
	for {
		select {
		case <-w.n.ctx.Done():
			w.flushAll()
			return
		case <-w.wake:
			w.flushAll()
		}
	}
}

func (w *stateWriter) flushAll() {
	for {
		w.mu.Lock()
		var r *writeReq
		for k, v := range w.next {
			r = v
			delete(w.next, k)
			break
		}
		w.mu.Unlock()
		if r == nil {
			return
		}
		w.write(r)
	}
}

func (w *stateWriter) write(r *writeReq) {
	var err error
	if r.valid != nil && !r.valid() {
		// The run that took this snapshot ended before it was written: a
		// newer run (or owner) writes its own.
		err = errFenced
		w.n.stats.staleWrites.Add(1)
		w.n.log.Debug("cluster backup dropped: its run ended", "key", r.key, "token", r.hdr.Token)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var rev uint64
		rev, err = w.n.store().write(ctx, r.key, r.rev(), r.hdr, r.state)
		cancel()
		if err == nil {
			r.ok(rev)
			w.n.stats.backups.Add(1)
			w.n.stats.backupBytes.Add(int64(len(r.state)))
		} else {
			w.n.log.Warn("cluster backup not written", "key", r.key, "err", err)
			r.fail(errors.Is(err, errFenced))
		}
	}
	if r.then != nil {
		r.then <- err
	}
}

func (w *stateWriter) close() { <-w.done }

func (n *Node) store() *stateStore { return &stateStore{n: n, objects: n.objects} }

// clusterFT is runtime.FT for a job in cluster mode: the kind drives its
// units' backups as in single-node mode (Merged, Due, WindowEnded); a
// unit is backed up only by the owner of its partition (or of the global
// unit), into the state bucket.
type clusterFT struct {
	st    *jobState
	units []*unitFT
	gamma int
}

// viewEvery is how often an owner writes a changed partition's state even
// below θ: other nodes answer queries from these writes.
const viewEvery = time.Second

// globalEvery is the least time between two backups of a global unit,
// which every node rebuilds from the delta stream anyway: the backup
// only bounds the replay after a restart of the whole cluster.
const globalEvery = 10 * time.Second

func newClusterFT(st *jobState) *clusterFT {
	f := &clusterFT{st: st, gamma: max(st.spec.FT.MaxUnacked/max(st.spec.Partitions, 1), 1)}
	sharing := isSharing(st)
	for _, u := range st.job.Units() {
		uf := &unitFT{f: f, unit: u, part: -1, theta: st.spec.FT.MaxDivergence}
		switch ps := u.Partitions(); {
		case sharing:
			// The global state: every node rebuilds it from the deltas.
		case len(ps) == 1:
			uf.part = ps[0]
		default:
			// A unit over several partitions of a kind that does not
			// share deltas cannot move with its partitions.
			st.n.log.Warn("a unit of several partitions has no fault tolerance in a cluster", "job", st.name(), "partitions", ps)
			uf.part = noPartition
		}
		if uf.part >= 0 {
			uf.zero = zeroState(u)
		}
		f.units = append(f.units, uf)
	}
	st.ft = f
	return f
}

func isSharing(st *jobState) bool {
	_, ok := st.job.Sharing()
	return ok
}

func (f *clusterFT) Unit(i int) runtime.FTUnit { return f.units[i] }
func (f *clusterFT) Gamma() int                { return f.gamma }

// unitOf is the unit of partition p (nil when the kind has none).
func (f *clusterFT) unitOf(p int) *unitFT {
	for _, u := range f.units {
		if u.part == p {
			return u
		}
	}
	return nil
}

func (f *clusterFT) global() *unitFT { return f.unitOf(-1) }

func (f *clusterFT) fenceGlobal(token uint64) {
	u := f.global()
	if u == nil {
		return
	}
	ctx, cancel := context.WithTimeout(f.st.n.ctx, 30*time.Second)
	defer cancel()
	_, _, rev, err := f.st.n.store().fence(ctx, stateKey(f.st.id, -1), token)
	if err != nil {
		f.st.n.log.Warn("taking the global unit over", "job", f.st.name(), "err", err)
		f.st.global.owned.Store(false)
		return
	}
	u.rev.Store(rev)
}

func (f *clusterFT) backupGlobalNow() {
	if u := f.global(); u != nil && u.owned() && f.st.share != nil {
		f.st.share.backupNow(u)
	}
}

// unitFT is one unit's backups in the cluster.
type unitFT struct {
	f     *clusterFT
	unit  runtime.Unit
	part  int // its partition; -1 for a global unit
	theta float64
	rev   atomic.Uint64 // the state entry's revision this owner writes over
	last  time.Time     // of the last backup; the unit's goroutine's
	// zero is the unit's state before any event: what a node that takes
	// the partition over installs when no backup exists, so that nothing
	// its copy held from an earlier ownership or view is counted again.
	zero []byte
	// dirty says that events were folded in since the last backup: the
	// view flusher writes the state within viewEvery even if no more come.
	dirty atomic.Bool
}

// noPartition marks a unit the cluster does not back up.
const noPartition = -2

func (u *unitFT) owned() bool {
	if u.part == noPartition {
		return false
	}
	if u.part < 0 {
		return u.f.st.global.owned.Load()
	}
	return u.f.st.parts[u.part].owned.Load()
}

func (u *unitFT) token() uint64 {
	if u.part < 0 {
		return u.f.st.global.token.Load()
	}
	return u.f.st.parts[u.part].token.Load()
}

// due says whether the unit is backed up now: past θ, or changed and its
// view stale.
func (u *unitFT) due(div float64, changed bool) bool {
	if !u.owned() {
		return false
	}
	if u.part < 0 {
		return div > u.theta && time.Since(u.last) >= globalEvery
	}
	return div > u.theta || changed && u.viewStale()
}

// viewStale says whether a changed partition's state is to be written
// now: not written for viewEvery (other nodes read it), or its job is
// sealed for a rescale, which waits for every partition's backup to hold
// its last event.
func (u *unitFT) viewStale() bool {
	return time.Since(u.last) >= viewEvery || u.f.st.seal.wanted.Load()
}

// Merged is runtime.FTUnit's: called with the unit's changes serialised.
func (u *unitFT) Merged(events, unlogged int, processed int64) {
	if u.due(u.unit.StateDivergence(), events > 0) {
		u.backup(false, nil)
	} else if events > 0 {
		u.dirty.Store(true)
	}
}

// flushViews writes, on their partitions' goroutines, the state of owned
// partitions that changed and were not written for viewEvery.
func (n *Node) flushViews() {
	for _, st := range n.jobsList() {
		if !st.ready.Load() || st.ft == nil || st.job == nil {
			continue
		}
		for _, u := range st.ft.units {
			if u.part >= 0 && u.owned() && u.dirty.Load() {
				ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
				_ = st.job.Do(ctx, u.part, func() {
					if u.owned() && u.dirty.Load() && u.viewStale() {
						u.backup(false, nil)
					}
				})
				cancel()
			}
		}
	}
}

// Due is runtime.FTUnit's.
func (u *unitFT) Due(div float64, atRisk int) bool { return u.due(div, atRisk > 0) }

// WindowEnded is runtime.FTUnit's: a window's end is backed up at once.
func (u *unitFT) WindowEnded() {
	if u.owned() {
		u.backup(false, nil)
	}
}

// backup snapshots the unit (on the goroutine that serialises its
// changes) and hands the write to the writer; then, if not nil, gets the
// write's outcome.
func (u *unitFT) backup(released bool, then chan error) {
	var buf bytes.Buffer
	div := u.unit.StateDivergence()
	if err := u.unit.BackupState(&buf, true); err != nil {
		u.f.st.n.log.Error("cluster backup: snapshot failed", "job", u.f.st.name(), "partition", u.part, "err", err)
		if then != nil {
			then <- err
		}
		return
	}
	u.last = time.Now()
	u.dirty.Store(false)
	h := stateHeader{Token: u.token(), Node: u.f.st.n.cfg.Node, Created: u.last.UTC(), Released: released,
		Seqs: u.unit.StateSeqs(), Divergence: div}
	st := u.f.st
	if u.part >= 0 {
		ps := st.parts[u.part]
		h.Rec = h.Seqs[0]
		var ok bool
		if h.Resume, h.Skip, ok = ps.ring.position(h.Rec); !ok {
			u.f.st.n.log.Warn("cluster backup skipped: its log position is unknown", "job", u.f.st.name(), "partition", u.part, "rec", h.Rec)
			if then != nil {
				then <- errors.New("cluster: log position unknown")
			}
			return
		}
		ps.ring.backedUp(h.Rec, h.Resume, h.Skip)
	} else if st.share != nil {
		h.Version = st.share.applied.Load()
	}
	token := h.Token
	st.n.writer.submit(&writeReq{key: stateKey(st.id, u.part), hdr: h, state: buf.Bytes(), then: then,
		rev:   u.rev.Load,
		ok:    u.rev.Store,
		valid: func() bool { return u.owned() && u.token() == token },
		fail: func(fenced bool) {
			if !fenced {
				// Not written (a leader election): the view flusher
				// writes the state again, even if no event comes.
				u.dirty.Store(true)
				return
			}
			// Only the run that wrote it stops: a write queued by an
			// earlier run of this node fails against the current one's
			// take-over record, and must not end it.
			switch {
			case !u.owned() || u.token() != token:
			case u.part >= 0:
				st.parts[u.part].fencedOff(token)
			default:
				st.n.log.Warn("fenced off: a newer owner took over", "job", st.name(), "partition", u.part)
				st.release(u.part, false)
			}
		}})
}

// zeroState snapshots a unit before its partition processed anything.
func zeroState(u runtime.Unit) []byte {
	var buf bytes.Buffer
	if err := u.BackupState(&buf, true); err != nil {
		return nil
	}
	return buf.Bytes()
}

// install makes a partition's state, written by its owner elsewhere,
// this node's read-only view of it (views.go).
func (u *unitFT) install(h stateHeader, state []byte) error {
	if err := u.unit.RecoverState(bytes.NewReader(state)); err != nil {
		return err
	}
	u.unit.Recovered(h.Seqs)
	return nil
}
