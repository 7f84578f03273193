package synopsis

import (
	"cmp"
	"math"
	"slices"

	"github.com/mlstream/mlstream/runtime"
	"github.com/mlstream/mlstream/synopses"
)

// Windows across partitions: each partition keeps its own copy of every
// window it had events for; a query merges the partitions' copies of one
// window (keyed by its start), chosen by the job's watermark. current is
// the window the watermark is in (the oldest open one; before there is a
// watermark, the oldest held), last the one before it (closed), all every
// window kept.

// Selection is what a query reports of the windows besides their merge.
type Selection struct {
	Span      synopses.Span
	Watermark int64
	HasWM     bool
	// Closed are the closed windows kept, ascending.
	Closed                 []synopses.Span
	Idle                   []int
	Late, Dropped, Evicted uint64
	Lost                   uint64 // values of events lost in crashes
}

// NewWatermark is the job's watermark by the params, on clock.
func (sp Params) NewWatermark(clock runtime.Clock) *runtime.Watermark {
	return runtime.NewWatermark(sp.Lateness, sp.Idle, clock)
}

// Join adds the partition to the job's watermark, which alone closes its
// windows from now on (also those a recovery restores).
func (p *Summary[S, W]) Join(wm *runtime.Watermark) {
	p.WM, p.Time = wm, wm.Partition()
	p.Sketch.SetWatermark(wm.Current())
}

// published is one partition's published copies.
type published[S any] struct {
	views                        []View[S]
	owed                         S
	hasOwed                      bool
	late, dropped, evicted, lost uint64
}

func (p *Summary[S, W]) published() published[S] {
	p.pub.Lock()
	defer p.pub.Unlock()
	return published[S]{p.pub.views, p.pub.owed, p.pub.hasOwed, p.pub.late, p.pub.dropped, p.pub.evicted, p.pub.lostValues}
}

// Select advances the job's watermark and hands add each partition's copy
// of the window(s) the query asks for (current, last or all), only copies
// of the same window.
func Select[S any, W Windowed[S], P interface{ summary() *Summary[S, W] }](sp Params, wm *runtime.Watermark, parts []P, window string, add func(S)) Selection {
	var sel Selection
	sel.Watermark, sel.HasWM = wm.Advance()
	sel.Idle = wm.Idle()
	pubs := make([]published[S], len(parts))
	for i, p := range parts {
		pubs[i] = p.summary().published()
		sel.Late += pubs[i].late
		sel.Dropped += pubs[i].dropped
		sel.Evicted += pubs[i].evicted
		sel.Lost += pubs[i].lost
	}
	size := max(sp.Window.Milliseconds(), 1)
	cur, ok := currentStart(sel, pubs, size)
	if !ok {
		for _, pb := range pubs {
			if pb.hasOwed {
				add(pb.owed)
			}
		}
		return sel
	}
	lo, hi := cur, cur
	switch window {
	case WindowLast:
		lo, hi = cur-size, cur-size
	case WindowAll:
		hi = math.MaxInt64
		if sel.HasWM {
			lo = cur - int64(sp.Keep)*size
		}
	}
	sel.Span = synopses.Span{Start: lo, End: lo + size}
	if window == WindowAll {
		sel.Span = synopses.Span{Start: cur, End: cur + size}
	}
	for _, pb := range pubs {
		held := false
		for _, v := range pb.views {
			if v.Span.Start >= lo && v.Span.Start <= hi {
				add(v.Sum)
				sel.Span.Start = min(sel.Span.Start, v.Span.Start)
				sel.Span.End = max(sel.Span.End, v.Span.End)
				held = held || v.Span.Start == cur
			}
			if sel.HasWM && v.Span.Start < cur && v.Span.Start >= cur-int64(sp.Keep)*size {
				sel.Closed = append(sel.Closed, v.Span)
			}
		}
		// A window this partition does not hold may still owe the
		// widening of a recovery.
		if pb.hasOwed && (window == WindowAll || window == WindowCurrent && !held) {
			add(pb.owed)
		}
	}
	slices.SortFunc(sel.Closed, func(a, b synopses.Span) int { return cmp.Compare(a.Start, b.Start) })
	sel.Closed = slices.Compact(sel.Closed)
	return sel
}

// currentStart is the start of the current window: the one the watermark
// is in, or, before there is one, the oldest any partition holds.
func currentStart[S any](sel Selection, pubs []published[S], size int64) (int64, bool) {
	if sel.HasWM {
		return floorDiv(sel.Watermark, size) * size, true
	}
	start, ok := int64(0), false
	for _, pb := range pubs {
		if len(pb.views) > 0 && (!ok || pb.views[0].Span.Start < start) {
			start, ok = pb.views[0].Span.Start, true
		}
	}
	return start, ok
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// WindowInfo is what a windowed query answer says of the job's windows:
// its watermark, the closed windows kept, the partitions left out of the
// watermark as idle, and the open windows let go because a partition ran
// more than keep windows ahead. Absent for the whole stream.
type WindowInfo struct {
	Watermark      *int64          `json:"watermark,omitempty"`
	Closed         []synopses.Span `json:"closed,omitempty"`
	IdlePartitions []int           `json:"idle_partitions,omitempty"`
	EvictedWindows uint64          `json:"evicted_windows,omitempty"`
}

// Info is the WindowInfo of a selection.
func (sp Params) Info(sel Selection) WindowInfo {
	if sp.Window == WholeStream {
		return WindowInfo{}
	}
	info := WindowInfo{Closed: sel.Closed, IdlePartitions: sel.Idle, EvictedWindows: sel.Evicted}
	if sel.HasWM {
		info.Watermark = &sel.Watermark
	}
	return info
}
