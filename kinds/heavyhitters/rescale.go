package heavyhitters

import (
	"github.com/mlstream/mlstream/kinds/internal/synopsis"
	"github.com/mlstream/mlstream/runtime"
	"github.com/mlstream/mlstream/synopses"
)

var _ runtime.Rescaling = (*job)(nil)

// RescaleInto moves the counters to the partition their item goes to
// with next's partition count (runtime.PartitionOf), window by window,
// keeping every item's bounds (synopses.RescaleHH).
func (j *job) RescaleInto(next runtime.Instance) error {
	nj, ok := next.(*job)
	if !ok {
		return runtime.NotRescalable(Name, next)
	}
	n := len(nj.parts)
	old := make([]*synopses.WindowedHH, len(j.parts))
	for i, p := range j.parts {
		old[i] = p.Sketch
	}
	for q, sk := range synopses.RescaleHH(old, n, func(item string) int { return runtime.PartitionOf(item, n) }) {
		nj.parts[q].Sketch = sk
	}
	synopsis.Inherit(j.parts, nj.parts)
	nj.wm.Seed(j.wm.Current())
	return nil
}
