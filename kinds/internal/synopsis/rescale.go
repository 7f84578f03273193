package synopsis

import (
	"fmt"

	"github.com/mlstream/mlstream/runtime"
)

// Rescaling (runtime.Rescaling) of the synopsis kinds.

// summary is the part's Summary, for Rescale: every partition of these
// kinds embeds one.
func (p *Summary[S, W]) summary() *Summary[S, W] { return p }

// Rescale moves the parts of a job before a rescale, from, into those of
// the job after, to: move places one old part's sketch into the new
// parts; the new part 0 takes what the old parts knew besides their
// sketches (α, the values of events lost in crashes). from is only read.
func Rescale[S any, W Windowed[S], P interface{ summary() *Summary[S, W] }](from, to []P, move func(i int, sketch W, to []P)) {
	dst := to[0].summary()
	var lost uint64
	for i, p := range from {
		o := p.summary()
		move(i, o.Sketch, to)
		dst.maxVals.Store(max(dst.maxVals.Load(), o.maxVals.Load()))
		o.pub.Lock()
		lost += o.pub.lostValues
		o.pub.Unlock()
	}
	dst.AddLostValues(lost)
}

// NotRescalable is the error of a rescale into an instance of another
// kind (never from the engine, which makes next of the same kind).
func NotRescalable(kind string, next runtime.Instance) error {
	return fmt.Errorf("%s: cannot rescale into a %T", kind, next)
}
