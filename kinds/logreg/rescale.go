package logreg

import (
	"bytes"
	"fmt"

	"github.com/mlstream/mlstream/runtime"
)

var _ runtime.Rescaling = (*logregJob)(nil)

// RescaleInto starts next's partitions from the global model: every
// partition merged its updates when it stopped (Idle), so the model holds
// every event, and the new partitions' learners start from it as at any
// merge. Progressive metrics go to partition i mod n (a status merges
// them all), the predictions held for delayed labels to the partition
// their id (the label's routing key) goes to now, the drift counts carry
// over, and the dictionary of feature names is shared. The old job is only read.
func (j *logregJob) RescaleInto(next runtime.Instance) error {
	nj, ok := next.(*logregJob)
	if !ok {
		return runtime.NotRescalable(Name, next)
	}
	if j.sharing() {
		return fmt.Errorf("logreg: a job with shared deltas (cluster mode) cannot be rescaled")
	}
	if err := j.copyModel(nj); err != nil {
		return err
	}
	n := len(nj.parts)
	for i, p := range j.parts {
		q := nj.parts[i%n]
		q.prog.Merge(p.prog)
		q.pub.Lock()
		q.pub.snap = q.prog.Clone()
		q.pub.Unlock()
	}
	j.movePending(nj)
	j.drifts.copyTo(&nj.drifts)
	nj.names = j.names
	nj.maxFeats.Store(j.maxFeats.Load())
	nj.merge.learned = j.merge.learned
	return nil
}

// copyModel copies the global model into nj's.
func (j *logregJob) copyModel(nj *logregJob) error {
	var buf bytes.Buffer
	if _, err := j.model.WriteTo(&buf); err != nil {
		return fmt.Errorf("logreg: model snapshot: %w", err)
	}
	if _, err := nj.model.ReadFrom(&buf); err != nil {
		return fmt.Errorf("logreg: model snapshot: %w", err)
	}
	return nil
}

// movePending hands the committed predictions held for labels to the
// partitions their ids go to with nj's count; their counts add up in
// partition 0. Recovered makes them the partitions' live sets.
func (j *logregJob) movePending(nj *logregJob) {
	n := len(nj.parts)
	for _, c := range j.committed {
		for id, e := range c.m {
			nj.committed[runtime.PartitionOf(id, n)].m[id] = e
		}
		nj.committed[0].counts.add(c.counts)
	}
}

// copyTo carries the drift counts over; the new partitions' detectors
// start at the current epoch, as after any drift action.
func (d *drifts) copyTo(nd *drifts) {
	d.mu.Lock()
	defer d.mu.Unlock()
	nd.count.Store(d.count.Load())
	nd.resets.Store(d.resets.Load())
	nd.epoch.Store(d.epoch.Load())
	if d.last != nil {
		last := d.last.clone()
		nd.last = &last
	}
}
