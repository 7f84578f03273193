package runtime

import (
	"fmt"
	"time"

	"github.com/valyala/fastjson"
)

// Delayed labels: a kind that keeps predictions for labels that come later
// (POST /v1/jobs/{job}/labels) receives those labels, and the predictions
// it must keep, as records of its own queues, routed by the record's Key
// like keyed events. The kind's partitions thus hold what waits for a
// label, and that is part of their state under fault tolerance and in a
// cluster, wherever the partition runs.

type (
	// Labelling is a kind that takes labels after its events.
	Labelling interface {
		// ExtractLabel reads one label (an element of a labels request)
		// into rec; its Key must be the one the labelled prediction was
		// routed with. now is the request's arrival time in epoch ms.
		ExtractLabel(v *fastjson.Value, rec *Record, a *Arena, now int64) error
	}
	// Holding is a Predictor that keeps some predictions for their labels:
	// after a Predict, Held returns the record to queue (ok false: none).
	// The record's slices must stay valid until the next Predict.
	Holding interface {
		Held() (rec Record, ok bool)
	}
)

// NewJobBatch starts a request of records for the job itself rather than
// for a stream's readers: labels, and predictions held for them. Commit
// queues them as it does events (counted as accepted events of the job's
// input stream).
func (e *Engine) NewJobBatch(name string) (*Batch, error) {
	j, err := e.Job(name)
	if err != nil {
		return nil, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.mu.closed {
		return nil, ErrClosed
	}
	now := time.Now()
	b := &Batch{e: e, stream: j.spec.Input, now: now, nowMs: now.UnixMilli(), jobs: []*jobBatch{newJobBatch(j)}}
	return b, nil
}

// AddLabel extracts one label for the batch's job (NewJobBatch), whose
// kind must be Labelling.
func (b *Batch) AddLabel(v *fastjson.Value, line int) error {
	if v.Type() != fastjson.TypeObject {
		return &InputError{Line: line, Msg: fmt.Sprintf("a label must be a JSON object, got %s", v.Type())}
	}
	jb := b.jobs[0]
	l, ok := jb.job.kind.instance().(Labelling)
	if !ok {
		return fmt.Errorf("%w: job %q is of kind %q, which takes no delayed labels", ErrNotSupported, jb.job.spec.Name, jb.job.spec.Kind)
	}
	jb.rec = Record{}
	if err := l.ExtractLabel(v, &jb.rec, &jb.arena, b.nowMs); err != nil {
		return inputError(err, line)
	}
	b.add(jb)
	return nil
}

// AddRecord queues a copy of rec for the batch's job (NewJobBatch): its
// features and values are copied into the batch.
func (b *Batch) AddRecord(rec Record) {
	jb := b.jobs[0]
	start := len(jb.arena.feats)
	jb.arena.feats = append(jb.arena.feats, rec.Features...)
	rec.Features = jb.arena.feats[start:len(jb.arena.feats):len(jb.arena.feats)]
	mark := jb.arena.ValueMark()
	for _, v := range rec.Values {
		jb.arena.AddValue(jb.arena.Str([]byte(v)))
	}
	rec.Values = jb.arena.Values(mark)
	rec.Key = jb.arena.Str([]byte(rec.Key))
	jb.rec = rec
	b.add(jb)
}

// add places jb.rec in its partition.
func (b *Batch) add(jb *jobBatch) {
	p := jb.partition(jb.rec.Key)
	jb.parts[p] = append(jb.parts[p], jb.rec)
	b.events++
}
