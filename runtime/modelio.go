package runtime

import (
	"errors"
	"fmt"
	"io"

	"github.com/valyala/fastjson"
)

// ModelIO is the optional capability of an Instance whose state is a model
// that can be exported and imported: GET /v1/jobs/{job}/model/export and
// PUT /v1/jobs/{job}/model. The API finds it by type assertion, naming no
// kind.
type ModelIO interface {
	// ExportModel writes the job's model to w in format ("" or "binary":
	// the kind's versioned binary format; "json": a readable form). An
	// unknown format is a *ModelError naming "format".
	ExportModel(w io.Writer, format string) error
	// ImportModel replaces the job's model with one ExportModel wrote (in
	// binary), read whole from r. A model that does not fit the job is a
	// *ModelError naming the mismatch, and leaves the job unchanged.
	ImportModel(r io.Reader) error
}

// ModelError is a model refused by ImportModel or a bad export request: a
// 400 naming Field.
type ModelError struct {
	Field string
	Msg   string
}

func (e *ModelError) Error() string { return e.Msg }

// ErrStopping is an import into a job that is shutting down: its last
// backup is being (or was) taken, and a model seeded now would be lost.
var ErrStopping = errors.New("the job is stopping")

// ModelIO returns the job's model capability, or an error wrapping
// ErrNotSupported for a kind without one.
func (j *Job) ModelIO() (ModelIO, error) {
	m, ok := j.kind.instance().(ModelIO)
	if !ok {
		return nil, fmt.Errorf("%w: job %q is of kind %q, which has no exportable model", ErrNotSupported, j.spec.Name, j.spec.Kind)
	}
	return m, nil
}

// FullBackuper is implemented by the FTUnit the engine gives a kind: a
// kind whose state was replaced wholesale (a model import) backs it up in
// full at once, stored and fsynced before BackupFull returns, so that a
// crash recovers the new state rather than
// replaying the log onto the old one. Call it as Merged is called:
// serialised with the kind's other changes to the unit. Closing reports
// that the job is taking its last backups (a shutdown or a delete): the
// state must not change any more. The engine closes fault tolerance only
// after every partition returned from its last Idle, so a kind that holds
// the lock its partitions' Idle takes between Closing and BackupFull is
// not overtaken by the shutdown, except in the instant between the last
// partition leaving and Closing turning true: an import landing there
// races the last backup (known gap; it needs a job deleted or the server
// stopped at that instant).
type FullBackuper interface {
	Closing() bool
	BackupFull()
}

func (h unitHandle) Closing() bool {
	h.u.f.mu.Lock()
	defer h.u.f.mu.Unlock()
	return h.u.f.closing
}

func (h unitHandle) BackupFull() {
	// Stored and fsynced before it returns: the caller answers the import
	// after it, and a crash after the answer must recover the new state.
	stored := make(chan struct{})
	h.u.backupThen(true, true, h.u.op.StateDivergence(), stored)
	<-stored
}

// Explaining is the optional capability of an Instance that can take one
// event's prediction apart by feature: POST /v1/jobs/{job}/explain. The
// answer encodes as a JSON object; an error is an InputError (or one that
// AtLine made) naming the line.
type Explaining interface {
	Explain(v *fastjson.Value, line int) (any, error)
}

// Explainer returns the job's explaining capability, or an error wrapping
// ErrNotSupported.
func (j *Job) Explainer() (Explaining, error) {
	e, ok := j.kind.instance().(Explaining)
	if !ok {
		return nil, fmt.Errorf("%w: job %q is of kind %q, which does not explain predictions", ErrNotSupported, j.spec.Name, j.spec.Kind)
	}
	return e, nil
}
