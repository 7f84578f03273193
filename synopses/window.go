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
// WindowedDistinct.
type windows[S ft.Stateful] struct {
	size    int64 // ms
	keep    int
	cur     *window[S]   // nil before the first event
	closed  []*window[S] // ascending idx, within [cur.idx-keep, cur.idx)
	late    uint64
	dropped uint64
	nclosed uint64
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

// target returns the summary an event at ts goes to, or nil if it is too
// late; late reports an event of a closed window, closed that the event
// closed the current window.
func (w *windows[S]) target(ts int64) (s S, ok, late, closed bool) {
	idx := floorDiv(ts, w.size)
	switch {
	case w.cur == nil:
		w.cur = w.open(idx)
	case idx > w.cur.idx:
		w.closed = append(w.closed, w.cur)
		w.nclosed++
		closed = true
		w.cur = w.open(idx)
		lo := idx - int64(w.keep)
		i := 0
		for i < len(w.closed) && w.closed[i].idx < lo {
			i++
		}
		w.closed = slices.Delete(w.closed, 0, i)
		w.pend = slices.DeleteFunc(w.pend, func(p pendingWiden) bool { return !p.open && p.upto < lo })
	case idx < w.cur.idx:
		if idx < w.cur.idx-int64(w.keep) {
			w.dropped++
			return s, false, false, false
		}
		w.late++
		i, found := slices.BinarySearchFunc(w.closed, idx, func(x *window[S], t int64) int {
			return cmp.Compare(x.idx, t)
		})
		if !found {
			w.closed = slices.Insert(w.closed, i, w.open(idx))
		}
		return w.closed[i].s, true, true, false
	}
	return w.cur.s, true, false, closed
}

// open creates window idx, applying the Widen calls it owes.
func (w *windows[S]) open(idx int64) *window[S] {
	nw := &window[S]{idx: idx, s: w.newS(), fresh: true}
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

// Widen widens every window now and those a lost event may have opened.
func (w *windows[S]) Widen(by uint64) {
	after := int64(math.MinInt64) // no window yet: the first to open owes it
	if w.cur != nil {
		for _, x := range w.closed {
			w.widen(x.s, by)
		}
		w.widen(w.cur.s, by)
		after = w.cur.idx
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

func (w *windows[S]) current() (Span, S) { return w.currentBy(w.clone) }

// currentBy is current with the copy made by cp.
func (w *windows[S]) currentBy(cp func(S) S) (Span, S) {
	if w.cur == nil {
		return Span{}, w.empty()
	}
	return w.span(w.cur.idx), cp(w.cur.s)
}

func (w *windows[S]) last() (Span, S) { return w.lastBy(w.clone) }

// lastBy is last with the copy made by cp.
func (w *windows[S]) lastBy(cp func(S) S) (Span, S) {
	if w.cur == nil {
		return Span{}, w.blank()
	}
	idx := w.cur.idx - 1
	if n := len(w.closed); n > 0 && w.closed[n-1].idx == idx {
		return w.span(idx), cp(w.closed[n-1].s)
	}
	return w.span(idx), w.blank()
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
	if w.cur == nil {
		return Span{}, w.empty()
	}
	sp := w.span(w.cur.idx)
	if len(w.closed) == 0 {
		// One window (always so for the whole stream): a copy is what a
		// merge into an empty summary would give, for a fraction of it.
		return sp, w.clone(w.cur.s)
	}
	s := w.newS()
	for _, x := range w.closed {
		w.merge(s, x.s)
	}
	if len(w.closed) > 0 {
		sp.Start = w.span(w.closed[0].idx).Start
	}
	w.merge(s, w.cur.s)
	return sp, s
}

// divergence is the largest of the windows', plus what a backup that could
// not be written left of it.
func (w *windows[S]) divergence() float64 {
	var d float64
	if w.cur != nil {
		d = w.cur.s.StateDivergence()
	}
	for _, x := range w.closed {
		d = max(d, x.s.StateDivergence())
	}
	return d + w.carried
}

func (w *windows[S]) list() []*window[S] {
	l := slices.Clone(w.closed)
	if w.cur != nil {
		l = append(l, w.cur)
	}
	return l
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

// recover applies a backup; on error w is unchanged. The last window listed
// is the current one.
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
	n := d.Count(uint64(w.keep)+1, 3)
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
	w.cur, w.closed = nil, nil
	if len(l) > 0 {
		w.cur = l[len(l)-1]
		w.closed = l[:len(l)-1]
	}
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
	if w.cur != nil && len(w.closed) == 0 {
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
