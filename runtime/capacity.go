package runtime

import "math"

// MaxEvents is the most events this request can ever commit: a job
// without load shedding takes at most its partitions' queue capacities in
// one request (Commit refuses more with ErrTooLarge even when the queues
// are empty). A job with load shedding sets no bound, as it may drop part
// of the request. The api checks it before parsing a body, from a cheap
// count of its events.
func (b *Batch) MaxEvents() int {
	most := math.MaxInt
	for _, jb := range b.jobs {
		if jb.job.shedDelay != 0 {
			continue
		}
		var capacity int64
		for _, p := range jb.job.parts {
			capacity += p.q.capacity
		}
		most = min(most, int(capacity))
	}
	return most
}
