package synopses

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/mlstream/mlstream/ft"
)

// Span is a window's event-time interval [Start, End) in milliseconds since
// the Unix epoch. The zero Span means no window (no event yet).
type Span struct {
	Start int64 `json:"start_ms"`
	End   int64 `json:"end_ms"`
}

type window[S ft.Stateful] struct {
	idx   int64 // window number: Start = idx·size
	s     S
	fresh bool // created since the last backup: the next delta carries it in full
	// view is the copy queries read, made by views; stale says s may have
	// changed since (the hot window always may: its events mark nothing).
	view  S
	hasV  bool
	stale bool
}

// pendingWiden is a Widen still owed to windows that did not exist when it
// was called: those with index in (after, upto] (upto set when the first
// window opens after the Widen).
type pendingWiden struct {
	by          uint64
	after, upto int64
	open        bool // upto not known yet
}

// windows is the tumbling-window logic shared by WindowedHH and
// WindowedDistinct. A window closes when the watermark passes its end:
// the summary's own largest event time, or, once SetWatermark was called,
// the watermark it is told (a job's, over all its partitions). It holds
// the last keep closed windows and the open ones, at most keep+open in
// all (DefaultOpen open ones unless SetMaxOpen said otherwise).
type windows[S ft.Stateful] struct {
	size int64 // ms
	keep int
	wins []*window[S] // ascending idx
	// hot is the open window the last event went to: the next event of
	// the same window takes the short way.
	hot *window[S]
	// ext: the watermark is told (SetWatermark), not the own max.
	ext bool
	// c is the first open window: every window below it is closed
	// (hasC false: none closed yet).
	c       int64
	hasC    bool
	maxTS   int64 // largest event time seen (hasMax)
	hasMax  bool
	late    uint64
	dropped uint64
	nclosed uint64
	maxOpen int    // most open windows held besides keep closed ones; 0: DefaultOpen
	evicted uint64 // windows let go to stay within keep+open
	pend    []pendingWiden

	newS     func() S
	blankS   S
	hasBlank bool
	clone    func(S) S
	// view copies a summary for reading only (copies), clone when nil.
	view  func(S) S
	merge func(dst, src S)
	widen func(S, uint64)

	// scratch and state are backup's buffers, reused.
	scratch []byte
	state   byteBuf
	// carried is the divergence at a backup that could not be written.
	carried float64
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func (w *windows[S]) span(idx int64) Span { return Span{idx * w.size, (idx + 1) * w.size} }

// DefaultOpen is how many open windows a summary holds at most by default.
const DefaultOpen = 4

// maxWindows is the most windows held: keep closed ones and open.
func (w *windows[S]) maxWindows() int {
	if w.maxOpen <= 0 {
		return w.keep + DefaultOpen
	}
	return w.keep + w.maxOpen
}

// target returns the summary an event at ts goes to, or nil if it is too
// late; late reports an event of a closed window, opened that the event
// opened a window after every one held (the runtime backs up there: a new
// window is punctuation).
func (w *windows[S]) target(ts int64) (s S, ok, late, opened bool) {
	idx := floorDiv(ts, w.size)
	if h := w.hot; h != nil && h.idx == idx {
		if ts > w.maxTS {
			w.maxTS = ts
		}
		return h.s, true, false, false
	}
	return w.targetSlow(ts, idx)
}

// targetSlow is target for an event of another window than the last one.
func (w *windows[S]) targetSlow(ts, idx int64) (s S, ok, late, opened bool) {
	prev := w.newest()
	opened = prev != nil && idx > prev.idx
	if !w.hasMax || ts > w.maxTS {
		w.maxTS, w.hasMax = ts, true
		if !w.ext {
			w.advance(ts)
		}
	}
	if w.hasC && idx < w.c {
		return w.targetLate(idx)
	}
	x, _ := w.at(idx)
	x.stale = true
	w.hot = x
	w.trim()
	return x.s, true, false, opened
}

// targetLate is target for an event of a closed window: added to it when
// kept, else dropped.
func (w *windows[S]) targetLate(idx int64) (s S, ok, late, opened bool) {
	if idx < w.c-int64(w.keep) {
		w.dropped++
		return s, false, false, false
	}
	w.late++
	x, _ := w.at(idx)
	x.stale = true
	return x.s, true, true, false
}

// at returns window idx, opened when missing.
func (w *windows[S]) at(idx int64) (x *window[S], made bool) {
	i, found := slices.BinarySearchFunc(w.wins, idx, func(x *window[S], t int64) int {
		return cmp.Compare(x.idx, t)
	})
	if !found {
		w.wins = slices.Insert(w.wins, i, w.open(idx))
	}
	return w.wins[i], !found
}

// trim lets the oldest windows go past maxWindows, counted in evicted:
// the summary's events ran too far ahead of the watermark, and a query of
// those windows misses this summary's part of them.
func (w *windows[S]) trim() {
	n := len(w.wins) - w.maxWindows()
	if n <= 0 {
		return
	}
	w.evicted += uint64(n)
	for _, x := range w.wins[:n] {
		if x == w.hot {
			w.hot = nil
		}
	}
	w.wins = slices.Delete(w.wins, 0, n)
}

// advance moves the watermark to wm: windows that end at or before it
// close, and closed ones older than keep are let go.
func (w *windows[S]) advance(wm int64) {
	c := floorDiv(wm, w.size)
	if w.hasC && c <= w.c {
		return
	}
	if w.hasC {
		w.nclosed++
	}
	w.c, w.hasC = c, true
	if w.hot != nil && w.hot.idx < c {
		w.hot = nil
	}
	lo := c - int64(w.keep)
	i := 0
	for i < len(w.wins) && w.wins[i].idx < lo {
		i++
	}
	w.wins = slices.Delete(w.wins, 0, i)
	w.pend = slices.DeleteFunc(w.pend, func(p pendingWiden) bool { return !p.open && p.upto < lo })
}

// setWatermark tells the watermark (ok false: none yet): from then on it,
// not the own largest event time, closes windows.
func (w *windows[S]) setWatermark(wm int64, ok bool) {
	if !w.ext {
		w.ext, w.hasC, w.hot = true, false, nil // the own watermark no longer counts
	}
	if ok {
		w.advance(wm)
	}
}

// open creates window idx, applying the Widen calls it owes.
func (w *windows[S]) open(idx int64) *window[S] {
	nw := &window[S]{idx: idx, s: w.newS(), fresh: true, stale: true}
	for i := range w.pend {
		p := &w.pend[i]
		if p.open && idx > p.after {
			p.upto, p.open = idx, false
		}
		if idx > p.after && (p.open || idx <= p.upto) {
			w.widen(nw.s, p.by)
		}
	}
	return nw
}

// newest is the window of largest index, nil when none.
func (w *windows[S]) newest() *window[S] {
	if len(w.wins) == 0 {
		return nil
	}
	return w.wins[len(w.wins)-1]
}

// Widen widens every window now and those a lost event may have opened.
func (w *windows[S]) Widen(by uint64) {
	after := int64(math.MinInt64) // no window yet: the first to open owes it
	if n := w.newest(); n != nil {
		for _, x := range w.wins {
			w.widen(x.s, by)
			x.stale = true
		}
		after = n.idx
	}
	w.pend = append(w.pend, pendingWiden{by: by, after: after, open: true})
}

// empty is the summary reported while no window exists: widened by what
// the first window will owe, so that a recovery that lost every event
// still reports bounds that hold.
func (w *windows[S]) empty() S {
	s := w.newS()
	for _, p := range w.pend {
		if p.open {
			w.widen(s, p.by)
		}
	}
	return s
}

// owed is what a window after every one held would hold on opening: the
// Widen calls it owes (ok false: none).
func (w *windows[S]) owed() (s S, ok bool) {
	for _, p := range w.pend {
		if p.open {
			return w.empty(), true
		}
	}
	return s, false
}

// currentIdx is the current window: the first open one, or, before any
// closed, the oldest held.
func (w *windows[S]) currentIdx() (int64, bool) {
	switch {
	case w.hasC:
		return w.c, true
	case len(w.wins) > 0:
		return w.wins[0].idx, true
	}
	return 0, false
}

// find returns window idx, nil when not held.
func (w *windows[S]) find(idx int64) *window[S] {
	i, found := slices.BinarySearchFunc(w.wins, idx, func(x *window[S], t int64) int {
		return cmp.Compare(x.idx, t)
	})
	if !found {
		return nil
	}
	return w.wins[i]
}

func (w *windows[S]) current() (Span, S) { return w.currentBy(w.clone) }

// currentBy is current with the copy made by cp.
func (w *windows[S]) currentBy(cp func(S) S) (Span, S) {
	idx, ok := w.currentIdx()
	if !ok {
		return Span{}, w.empty()
	}
	if x := w.find(idx); x != nil {
		return w.span(idx), cp(x.s)
	}
	return w.span(idx), w.blank()
}

func (w *windows[S]) last() (Span, S) { return w.lastBy(w.clone) }

// lastBy is last with the copy made by cp.
func (w *windows[S]) lastBy(cp func(S) S) (Span, S) {
	idx, ok := w.currentIdx()
	if !ok {
		return Span{}, w.blank()
	}
	if x := w.find(idx - 1); x != nil {
		return w.span(idx - 1), cp(x.s)
	}
	return w.span(idx - 1), w.blank()
}

// blank is one empty summary, made once: what last returns while there is
// no last window, which callers only read.
func (w *windows[S]) blank() S {
	if !w.hasBlank {
		w.blankS, w.hasBlank = w.newS(), true
	}
	return w.blankS
}

func (w *windows[S]) all() (Span, S) {
	idx, ok := w.currentIdx()
	if !ok {
		return Span{}, w.empty()
	}
	sp := w.span(idx)
	if len(w.wins) == 1 && w.wins[0].idx == idx {
		// One window (always so for the whole stream): a copy is what a
		// merge into an empty summary would give, for a fraction of it.
		return sp, w.clone(w.wins[0].s)
	}
	s := w.newS()
	for _, x := range w.wins {
		w.merge(s, x.s)
	}
	if len(w.wins) > 0 {
		sp.Start = min(sp.Start, w.span(w.wins[0].idx).Start)
		sp.End = max(sp.End, w.span(w.newest().idx).End)
	}
	return sp, s
}

// views returns a copy of every window held, ascending: a window copied
// before and not changed since keeps its copy.
func (w *windows[S]) views() []Window[S] {
	cp := w.clone
	if w.view != nil {
		cp = w.view
	}
	out := make([]Window[S], len(w.wins))
	for i, x := range w.wins {
		if x.stale || !x.hasV {
			x.view, x.hasV = cp(x.s), true
			x.stale = x == w.hot
		}
		out[i] = Window[S]{Span: w.span(x.idx), Sum: x.view}
	}
	return out
}

// divergence is the largest of the windows', plus what a backup that could
// not be written left of it.
func (w *windows[S]) divergence() float64 {
	var d float64
	for _, x := range w.wins {
		d = max(d, x.s.StateDivergence())
	}
	return d + w.carried
}

func (w *windows[S]) list() []*window[S] {
	return slices.Clone(w.wins)
}

// Payload modes of a window in a backup.
const (
	winDelta = 1
	winFull  = 2
)

// backup writes the windows, each in full when full or when it opened
// since the previous backup, else as its delta. Should out refuse the
// bytes, the windows' summaries have all the same counted them as backed
// up: the next backup then carries every window in full, and the
// divergence keeps what it had.
func (w *windows[S]) backup(out io.Writer, magic string, full bool) error {
	div := w.divergence()
	l := w.list()
	b, err := w.appendBackup(w.scratch[:0], l, magic, full)
	w.scratch = b
	if err == nil {
		_, err = out.Write(b)
	}
	if err != nil {
		for _, x := range l {
			x.fresh = true
		}
		w.carried = div
		return err
	}
	for _, x := range l {
		x.fresh = false
	}
	w.carried = 0
	return nil
}

// appendBackup encodes the windows of l.
func (w *windows[S]) appendBackup(b []byte, l []*window[S], magic string, full bool) ([]byte, error) {
	b = appendHeader(b, magic, full)
	for _, v := range []uint64{uint64(w.size), uint64(w.keep), w.late, w.dropped, w.nclosed, uint64(len(w.pend))} {
		b = binary.AppendUvarint(b, v)
	}
	for _, p := range w.pend {
		b = binary.AppendUvarint(b, p.by)
		b = binary.AppendVarint(b, p.after)
		b = binary.AppendVarint(b, p.upto)
		b = append(b, boolByte(p.open))
	}
	b = binary.AppendUvarint(b, uint64(len(l)))
	buf := &w.state
	for _, x := range l {
		b = binary.AppendVarint(b, x.idx)
		f := full || x.fresh
		buf.b = buf.b[:0]
		if err := x.s.BackupState(buf, f); err != nil {
			return b, err
		}
		if f {
			b = append(b, winFull)
		} else {
			b = append(b, winDelta)
		}
		// appendStr's encoding, without a string copy of the state.
		b = binary.AppendUvarint(b, uint64(len(buf.b)))
		b = append(b, buf.b...)
	}
	return b, nil
}

type byteBuf struct{ b []byte }

func (b *byteBuf) Write(p []byte) (int, error) {
	b.b = append(b.b, p...)
	return len(p), nil
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// recover applies a backup; on error w is unchanged. The windows' own
// watermark is the start of the newest (a lower bound of the largest
// event time it saw); a told watermark is told again.
func (w *windows[S]) recover(r io.Reader, magic string) error {
	data, err := readAll(r)
	if err != nil {
		return err
	}
	d := newDec(data)
	kind := d.Header(magic)
	size, keep := d.Uvarint(), d.Uvarint()
	late, dropped, nclosed := d.Uvarint(), d.Uvarint(), d.Uvarint()
	if d.Err != nil {
		return d.Err
	}
	if size != uint64(w.size) || keep != uint64(w.keep) {
		return fmt.Errorf("%w: windows of %d ms keeping %d, backup has %d ms keeping %d", ErrMismatch, w.size, w.keep, size, keep)
	}
	npend := d.Count(1<<20, 4)
	pend := make([]pendingWiden, 0, npend)
	for range npend {
		p := pendingWiden{by: d.Uvarint()}
		p.after = d.Varint()
		p.upto = d.Varint()
		p.open = d.Byte() == 1
		pend = append(pend, p)
	}
	n := d.Count(uint64(w.maxWindows()), 3)
	old := map[int64]*window[S]{}
	for _, x := range w.list() {
		old[x.idx] = x
	}
	var l []*window[S]
	for range n {
		idx := d.Varint()
		mode := d.Byte()
		payload := d.Str()
		if d.Err != nil {
			return d.Err
		}
		if len(l) > 0 && idx <= l[len(l)-1].idx {
			return fmt.Errorf("%w: windows out of order", ErrCorrupt)
		}
		var s S
		switch {
		case mode == winFull:
			s = w.newS()
		case mode == winDelta && kind == kindDelta && old[idx] != nil:
			s = w.clone(old[idx].s)
		default:
			return fmt.Errorf("%w: window %d mode %d", ErrCorrupt, idx, mode)
		}
		if err := s.RecoverState(&byteReader{b: []byte(payload)}); err != nil {
			return err
		}
		l = append(l, &window[S]{idx: idx, s: s})
	}
	if err := d.End(); err != nil {
		return err
	}
	w.late, w.dropped, w.nclosed, w.pend, w.carried = late, dropped, nclosed, pend, 0
	w.place(l)
	return nil
}

type byteReader struct{ b []byte }

func (r *byteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// Window is a copy of one window's summary and the window's span.
type Window[S any] struct {
	Span Span
	Sum  S
}

// copies returns what current, last and all return, but all is the
// current window's copy itself when the current window is the only one (as
// it always is over the whole stream): a copy fewer, for callers that only
// read the copies.
func (w *windows[S]) copies() (cur, last, all Window[S]) {
	cp := w.clone
	if w.view != nil {
		cp = w.view
	}
	cur.Span, cur.Sum = w.currentBy(cp)
	last.Span, last.Sum = w.lastBy(cp)
	if idx, ok := w.currentIdx(); ok && len(w.wins) == 1 && w.wins[0].idx == idx {
		return cur, last, cur
	}
	all.Span, all.Sum = w.all()
	return cur, last, all
}

func windowSize(size time.Duration) int64 { return max(size.Milliseconds(), 1) }

// WindowedHH is heavy hitters per tumbling event-time window, keeping the
// last `keep` closed windows. It implements ft.Stateful: the divergence is
// the largest of its windows'; a delta backup carries the changed counters
// of every window that existed at the previous backup and every window
// opened since in full. Not safe for concurrent use.
type WindowedHH struct {
	w windows[*HeavyHitters]
}

var _ ft.Stateful = (*WindowedHH)(nil)

// NewWindowedHH returns heavy hitters of the given number of counters per
// window of the given size (at least 1 ms), keeping keep closed windows.
func NewWindowedHH(counters int, size time.Duration, keep int) *WindowedHH {
	return &WindowedHH{w: windows[*HeavyHitters]{
		size:  windowSize(size),
		keep:  max(keep, 0),
		newS:  func() *HeavyHitters { return NewHeavyHitters(counters) },
		clone: (*HeavyHitters).Clone,
		view:  (*HeavyHitters).viewCopy,
		merge: (*HeavyHitters).Merge,
		widen: (*HeavyHitters).Widen,
	}}
}

// Update adds weight wt to item in the window of event time ts (ms). late
// reports an event of a kept closed window (added to it); closed that the
// event opened a new window and closed the current one (the runtime resets
// its fault-tolerance thresholds there). An event older than every kept
// window is counted in Dropped and changes nothing.
func (h *WindowedHH) Update(item string, wt uint64, ts int64) (late, closed bool) {
	s, ok, late, closed := h.w.target(ts)
	if ok {
		s.Update(item, wt)
	}
	return late, closed
}

// Current is a copy of the current window's summary, with its span.
func (h *WindowedHH) Current() (Span, *HeavyHitters) { return h.w.current() }

// Windows returns Current, Last and All at once, for callers that only read
// them: All is then Current's copy itself while the current window is the
// only one, and the copies leave out what only updates and backups use
// (Get on them scans the counters; Update must not be called on them).
func (h *WindowedHH) Windows() (current, last, all Window[*HeavyHitters]) { return h.w.copies() }

// Last is a copy of the window just before the current one (empty if it had
// no events).
func (h *WindowedHH) Last() (Span, *HeavyHitters) { return h.w.last() }

// All is the merge of the kept windows and the current one.
func (h *WindowedHH) All() (Span, *HeavyHitters) { return h.w.all() }

// SetWatermark tells the watermark that closes windows (ok false: none
// yet, so none closes): a job's over its partitions. From the first call
// on, the summary's own largest event time no longer closes windows.
func (h *WindowedHH) SetWatermark(wm int64, ok bool) { h.w.setWatermark(wm, ok) }

// MaxTime is the largest event time seen (ok false: none).
func (h *WindowedHH) MaxTime() (ts int64, ok bool) { return h.w.maxTS, h.w.hasMax }

// Views returns a copy of each window held (the open ones and the last
// keep closed), ascending, for readers only; a window unchanged since the
// previous call keeps its copy. owed, when owes, is what a window opened
// after every one held would hold (the widening a recovery left it).
func (h *WindowedHH) Views() (views []Window[*HeavyHitters], owed *HeavyHitters, owes bool) {
	owed, owes = h.w.owed()
	return h.w.views(), owed, owes
}

// Evicted is the number of windows let go because the summary held keep
// closed and the most open ones (its events ran that far ahead of the
// watermark).
func (h *WindowedHH) Evicted() uint64 { return h.w.evicted }

// SetMaxOpen sets how many open windows are held at most besides the keep
// closed ones (DefaultOpen by default).
func (h *WindowedHH) SetMaxOpen(n int) { h.w.maxOpen = n }

// Late is the number of events added to a closed window.
func (h *WindowedHH) Late() uint64 { return h.w.late }

// Dropped is the number of events older than every kept window.
func (h *WindowedHH) Dropped() uint64 { return h.w.dropped }

// ClosedCount is the number of windows closed so far.
func (h *WindowedHH) ClosedCount() uint64 { return h.w.nclosed }

// Widen widens every kept and current window by `by` (see
// HeavyHitters.Widen), and also the windows that lost events may have
// opened: those after the current one up to the first window opened after
// this call (created then, or later by a late event).
func (h *WindowedHH) Widen(by uint64) { h.w.Widen(by) }

// StateDivergence is the largest divergence of the windows.
func (h *WindowedHH) StateDivergence() float64 { return h.w.divergence() }

// BackupState writes every window (full) or what changed (delta).
func (h *WindowedHH) BackupState(w io.Writer, full bool) error {
	return h.w.backup(w, "WSHH", full)
}

// RecoverState applies a backup of windows of the same size and keep.
func (h *WindowedHH) RecoverState(r io.Reader) error { return h.w.recover(r, "WSHH") }

// WindowedDistinct is distinct counts per tumbling event-time window, as
// WindowedHH. Not safe for concurrent use.
type WindowedDistinct struct {
	w windows[*Distinct]
}

var _ ft.Stateful = (*WindowedDistinct)(nil)

// NewWindowedDistinct returns sketches of the given precision per window.
func NewWindowedDistinct(precision uint8, size time.Duration, keep int) (*WindowedDistinct, error) {
	if _, err := NewDistinct(precision); err != nil {
		return nil, err
	}
	return &WindowedDistinct{w: windows[*Distinct]{
		size: windowSize(size),
		keep: max(keep, 0),
		newS: func() *Distinct {
			s, _ := NewDistinct(precision)
			return s
		},
		clone: (*Distinct).Clone,
		merge: func(dst, src *Distinct) { _ = dst.Merge(src) }, // same precision
		widen: func(s *Distinct, by uint64) { s.Widen(int(min(by, 1<<31))) },
	}}, nil
}

// InsertHash adds an item by its hash at event time ts (ms); late and
// closed as in WindowedHH.Update.
func (d *WindowedDistinct) InsertHash(x uint64, ts int64) (late, closed bool) {
	s, ok, late, closed := d.w.target(ts)
	if ok {
		s.InsertHash(x)
	}
	return late, closed
}

// Insert adds an item at event time ts (ms).
func (d *WindowedDistinct) Insert(b []byte, ts int64) (late, closed bool) {
	s, ok, late, closed := d.w.target(ts)
	if ok {
		s.Insert(b)
	}
	return late, closed
}

// InsertString adds an item given as a string at event time ts (ms).
func (d *WindowedDistinct) InsertString(v string, ts int64) (late, closed bool) {
	s, ok, late, closed := d.w.target(ts)
	if ok {
		s.InsertString(v)
	}
	return late, closed
}

// Current is a copy of the current window's sketch, with its span.
func (d *WindowedDistinct) Current() (Span, *Distinct) { return d.w.current() }

// Windows returns Current, Last and All at once, for callers that only read
// them: All is then Current's copy itself while the current window is the
// only one, and the copies leave out what only updates and backups use
// (Get on them scans the counters; Update must not be called on them).
func (d *WindowedDistinct) Windows() (current, last, all Window[*Distinct]) { return d.w.copies() }

// Last is a copy of the window before the current one.
func (d *WindowedDistinct) Last() (Span, *Distinct) { return d.w.last() }

// All is the union of the kept windows and the current one.
func (d *WindowedDistinct) All() (Span, *Distinct) { return d.w.all() }

// SetWatermark tells the watermark, as WindowedHH.SetWatermark.
func (d *WindowedDistinct) SetWatermark(wm int64, ok bool) { d.w.setWatermark(wm, ok) }

// MaxTime is the largest event time seen (ok false: none).
func (d *WindowedDistinct) MaxTime() (ts int64, ok bool) { return d.w.maxTS, d.w.hasMax }

// Views returns a copy of each window held, as WindowedHH.Views.
func (d *WindowedDistinct) Views() (views []Window[*Distinct], owed *Distinct, owes bool) {
	owed, owes = d.w.owed()
	return d.w.views(), owed, owes
}

// Evicted is the number of windows let go, as WindowedHH.Evicted.
func (d *WindowedDistinct) Evicted() uint64 { return d.w.evicted }

// SetMaxOpen is WindowedHH.SetMaxOpen.
func (d *WindowedDistinct) SetMaxOpen(n int) { d.w.maxOpen = n }

// Late is the number of events added to a closed window.
func (d *WindowedDistinct) Late() uint64 { return d.w.late }

// Dropped is the number of events older than every kept window.
func (d *WindowedDistinct) Dropped() uint64 { return d.w.dropped }

// ClosedCount is the number of windows closed so far.
func (d *WindowedDistinct) ClosedCount() uint64 { return d.w.nclosed }

// Widen records lost register increases in every window a lost event may
// be in (as WindowedHH.Widen).
func (d *WindowedDistinct) Widen(registers int) { d.w.Widen(uint64(max(registers, 0))) }

// StateDivergence is the largest divergence of the windows.
func (d *WindowedDistinct) StateDivergence() float64 { return d.w.divergence() }

// BackupState writes every window (full) or what changed (delta).
func (d *WindowedDistinct) BackupState(w io.Writer, full bool) error {
	return d.w.backup(w, "WHLL", full)
}

// RecoverState applies a backup of windows of the same size and keep.
func (d *WindowedDistinct) RecoverState(r io.Reader) error { return d.w.recover(r, "WHLL") }
