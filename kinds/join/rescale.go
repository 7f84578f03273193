package join

import (
	"github.com/mlstream/mlstream/joins"
	"github.com/mlstream/mlstream/runtime"
)

var _ runtime.Rescaling = (*joinJob)(nil)

// RescaleInto re-hashes the buffered tuples by key onto next's partitions
// (joins.Rescale): the hash each tuple keeps is the key's, the one the
// engine routes with, so a tuple lands where its key's events now go and
// goes on matching them. Window estimates and counters add up as a query
// adds up partitions; the recent matches go to partition 0.
func (j *joinJob) RescaleInto(next runtime.Instance) error {
	nj, ok := next.(*joinJob)
	if !ok {
		return runtime.NotRescalable(Name, next)
	}
	n := uint64(len(nj.parts))
	joins.Rescale(joinsOf(j.parts), joinsOf(nj.parts), func(h uint64) int { return int(h % n) })
	dst := nj.parts[0]
	for _, p := range j.parts {
		for i := range min(p.nrec, recentMatches) {
			dst.recent[dst.nrec%recentMatches] = p.recent[(p.nrec-1-i)%recentMatches]
			dst.nrec++
		}
	}
	return nil
}

func joinsOf(parts []*joinPart) []*joins.Join {
	out := make([]*joins.Join, len(parts))
	for i, p := range parts {
		out[i] = p.jn
	}
	return out
}
