package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Rescaling in cluster mode. There, a job's state lives in the cluster's
// backups, not in one process, so the cluster drives a rescale: it holds
// ingest on every node (HoldIngest), waits until the partitions' owners
// backed up every event of the log, moves the backed-up state to the new
// count on one node (RescaleUnits), stores it for the job's next
// incarnation, and then every node swaps its copy of the job for one
// with the new count (ReplaceJob), the held requests going to it.

// ErrRescaling: the job is being rescaled (cluster mode: one at a time).
var ErrRescaling = errors.New("runtime: the job is being rescaled")

// CheckRescale checks that the named job may go to partitions partitions
// as a cluster rescale, and returns its spec with that count. Errors as
// Rescale's: ErrUnknownJob, *SpecError, ErrNotSupported,
// ErrRescalePaused, *BudgetError.
func (e *Engine) CheckRescale(name string, partitions int) (Spec, error) {
	if err := e.checkPartitions(partitions); err != nil {
		return Spec{}, err
	}
	j, err := e.Job(name)
	if err != nil {
		return Spec{}, err
	}
	if err := j.rescalable(partitions); err != nil {
		return Spec{}, err
	}
	spec := j.spec
	spec.Partitions = partitions
	if _, err := newKindJob(spec); err != nil {
		return Spec{}, fmt.Errorf("with %d partitions: %w", partitions, err)
	}
	mem, err := estimateMemory(spec, false)
	if err != nil {
		return Spec{}, err
	}
	if err := e.admitRescale(j, mem); err != nil {
		return Spec{}, err
	}
	e.unadmitRescale(j, mem)
	return spec, nil
}

// PartitionsOnly says whether spec, as a PUT gives it, is a running
// job's spec but for its partition count: a PUT of it rescales the job.
func (e *Engine) PartitionsOnly(spec Spec) bool {
	if spec.validate(e.cfg.Partitions, e.cfg.QueueSize) != nil {
		return false
	}
	j, err := e.Job(spec.Name)
	return err == nil && onlyPartitionsDiffer(j.spec, spec)
}

// RescaleTimeout is Config.RescaleTimeout: how long a rescale may take.
func (e *Engine) RescaleTimeout() time.Duration { return e.cfg.RescaleTimeout }

// RescaleUnits moves the state of a job of spec to partitions
// partitions, as a rescale in one process does, on instances that run
// nothing (no engine, outputs or fault tolerance): load restores each
// unit of the job as it is (Unit.RecoverState; a unit load leaves alone
// is as new), then the kind moves the state (Rescaling), and save gets
// each unit of the new layout, whose Unit.BackupState is then its state.
func RescaleUnits(spec Spec, partitions int, load, save func(Unit) error) error {
	old, err := detachedUnits(spec)
	if err != nil {
		return err
	}
	rs, ok := old.instance().(Rescaling)
	if !ok {
		return fmt.Errorf("%w: kind %q cannot move its state to another partition count", ErrNotSupported, spec.Kind)
	}
	for _, u := range unitsOf(old) {
		if err := load(u); err != nil {
			return err
		}
	}
	next := spec
	next.Partitions = partitions
	nk, err := detachedUnits(next)
	if err != nil {
		return err
	}
	if err := rs.RescaleInto(nk.instance()); err != nil {
		return fmt.Errorf("moving the state: %w", err)
	}
	for _, u := range unitsOf(nk) {
		u.Recovered(make([]uint64, len(u.Partitions())))
		if err := save(u); err != nil {
			return err
		}
	}
	return nil
}

// detachedUnits is a kind's instance of spec with its partitions made,
// for RescaleUnits: its outputs go to a hub no one reads.
func detachedUnits(spec Spec) (kindJob, error) {
	k, err := newKindJob(spec)
	if err != nil {
		return nil, err
	}
	hub := NewHub()
	for i := range spec.Partitions {
		k.instance().NewPartition(i, Emitter{hub: hub, job: spec.Name, slot: i + 1})
	}
	if ftk, ok := k.instance().(FaultTolerant); ok {
		ftk.SetFT(detachedFT{})
	}
	return k, nil
}

// detachedFT is the fault tolerance of detachedUnits' instances: their
// kinds keep the state a backup needs, and nothing is backed up.
type detachedFT struct{}

func (detachedFT) Unit(int) FTUnit                              { return detachedFT{} }
func (detachedFT) Gamma() int                                   { return 1 << 30 }
func (detachedFT) Merged(events, unlogged int, processed int64) {}
func (detachedFT) Due(div float64, atRisk int) bool             { return false }
func (detachedFT) WindowEnded()                                 {}

func unitsOf(k kindJob) []Unit {
	if ft, ok := k.instance().(FaultTolerant); ok {
		return ft.Units()
	}
	return nil
}

// HoldIngest stops admitting requests to the job (they wait, as during a
// rescale, up to Config.IngestWait) and waits until those admitted
// ended, or ctx ends. Holding a held job only waits again.
func (j *Job) HoldIngest(ctx context.Context) error { return j.ingest.hold(ctx) }

// OpenIngest admits requests again after HoldIngest (a rescale that did
// not happen).
func (j *Job) OpenIngest() { j.ingest.open(nil) }

// ReplaceJob swaps the named job, in cluster mode, for one of spec (the
// same but for its partition count): the new job is attached to the
// cluster, which gives it its state, and started; the requests that
// wait at the old job's held ingest go to it, and the old job stops. rep
// is the rescale (its Generation the cluster's count of the job's
// layouts), recorded in the new job's status and sent as the rescale
// message.
func (e *Engine) ReplaceJob(ctx context.Context, spec Spec, rep RescaleReport) error {
	if e.cfg.Cluster == nil {
		return errors.New("runtime: ReplaceJob is for cluster mode")
	}
	old, err := e.lockLineage(spec.Name)
	if err != nil {
		return err
	}
	defer old.rescaleMu.Unlock()
	if !onlyPartitionsDiffer(old.spec, spec) {
		return fmt.Errorf("runtime: job %q: a replacement may change only the partition count", spec.Name)
	}
	if err := old.ingest.hold(ctx); err != nil {
		return err
	}
	nj, err := e.successor(old, spec)
	if err != nil {
		old.ingest.open(nil)
		return err
	}
	e.route(old, nj)
	old.ingest.open(nj)
	// Stopped, but not its autoscaler: the lineage's goes on with nj.
	old.stop()
	e.cfg.Cluster.Detach(old)
	rep.Processed = nj.processedBase
	nj.elastic.mu.Lock()
	nj.elastic.generation = rep.Generation
	a := nj.elastic.auto
	nj.elastic.mu.Unlock()
	nj.elastic.record(rep)
	if a != nil {
		a.rescaledBy(rep)
	}
	e.announceRescale(spec.Name, rep)
	return nil
}

// successor builds, attaches and starts old's replacement of spec.
func (e *Engine) successor(old *Job, spec Spec) (*Job, error) {
	mem, err := estimateMemory(spec, false)
	if err != nil {
		return nil, err
	}
	if err := e.admitRescale(old, mem); err != nil {
		return nil, err
	}
	nj, err := e.successorOf(old, spec, mem, old.slot)
	if err == nil {
		err = e.cfg.Cluster.Attach(nj)
		if err != nil {
			nj.discard()
		}
	}
	if err != nil {
		e.unadmitRescale(old, mem)
		return nil, fmt.Errorf("job %q: %w", spec.Name, err)
	}
	nj.startPartitions()
	nj.sample(time.Now())
	return nj, nil
}

// route makes nj the job of old's name and streams.
func (e *Engine) route(old, nj *Job) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mu.jobs[nj.spec.Name] = nj
	for _, st := range nj.spec.Streams() {
		readers := slices.Clone(e.mu.streams[st])
		for i, r := range readers {
			if r == old {
				readers[i] = nj
			}
		}
		e.mu.streams[st] = readers
	}
}
