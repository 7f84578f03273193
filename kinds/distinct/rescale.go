package distinct

import (
	"github.com/mlstream/mlstream/kinds/internal/synopsis"
	"github.com/mlstream/mlstream/runtime"
)

var _ runtime.Rescaling = (*job)(nil)

// RescaleInto merges the HyperLogLog registers where partitions merge:
// old partition i goes into new partition i mod n, window by window. A
// split keeps each old sketch whole in the partition of its index, as a
// base that queries merge with the others (registers hold no keys to
// split by); the new partitions start empty. Either way a query, the
// union of every partition's sketch, answers as before.
func (j *job) RescaleInto(next runtime.Instance) error {
	nj, ok := next.(*job)
	if !ok {
		return runtime.NotRescalable(Name, next)
	}
	for i, p := range j.parts {
		nj.parts[i%len(nj.parts)].Sketch.MergeFrom(p.Sketch)
	}
	synopsis.Inherit(j.parts, nj.parts)
	nj.wm.Seed(j.wm.Current())
	return nil
}
