package heavyhitters

import (
	"github.com/mlstream/mlstream/kinds/internal/synopsis"
	"github.com/mlstream/mlstream/runtime"
	"github.com/mlstream/mlstream/synopses"
)

var _ runtime.Rescaling = (*job)(nil)

// RescaleInto moves the counters to the partition their item goes to
// with next's partition count (runtime.PartitionOf), window by window:
// each old summary is split by item and the pieces bound for one
// partition are merged, which keeps every item's bounds (see
// synopses.HeavyHitters.SplitBy).
func (j *job) RescaleInto(next runtime.Instance) error {
	nj, ok := next.(*job)
	if !ok {
		return synopsis.NotRescalable(Name, next)
	}
	n := len(nj.parts)
	to := func(item string) int { return runtime.PartitionOf(item, n) }
	synopsis.Rescale(j.parts, nj.parts, func(_ int, sk *synopses.WindowedHH, parts []*part) {
		for q, piece := range sk.SplitBy(n, to) {
			parts[q].Sketch.MergeFrom(piece)
		}
	})
	return nil
}
