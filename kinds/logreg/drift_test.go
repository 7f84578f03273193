package logreg

import (
	"slices"
	"testing"

	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/runtime"
)

// One change of the stream, seen by the detectors of all four partitions,
// is one drift of the job that names them, not four.
func TestDriftCountedOncePerJob(t *testing.T) {
	const train, driftAfter = 32_000, 16_000
	lines, _ := events(gen.New(gen.Config{Seed: 5, DriftAfter: driftAfter}), train)
	spec := testSpec(4)
	e, j := node(t, nil, spec, runtime.Config{Partitions: 4})
	ingest(t, e, lines)
	job, err := e.Job(spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the events processed", func() bool { return job.Status(false).Processed == train })
	st := j.drifts.status()
	if st.Drifts != 1 || st.Last == nil || len(st.Last.Partitions) < 2 {
		t.Fatalf("drifts %+v, last %+v: want one drift seen by several partitions", st, st.Last)
	}
	if p := slices.Clone(st.Last.Partitions); len(slices.Compact(slices.Sorted(slices.Values(p)))) != len(p) {
		t.Fatalf("a partition is named twice: %v", p)
	}
	t.Logf("one drift, seen by partitions %v", st.Last.Partitions)
}
