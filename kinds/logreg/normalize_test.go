package logreg

import (
	"bytes"
	"errors"
	"testing"

	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
)

// normalizeJob starts a 1-partition job with the given normalize param
// ("" leaves it out).
func normalizeJob(t *testing.T, normalize string) *logregJob {
	spec := testSpec(1)
	if normalize != "" {
		spec.Params["normalize"] = normalize
	}
	_, j := node(t, nil, spec, runtime.Config{})
	return j
}

// A job that leaves normalize to the default takes the normalization of
// the model it imports (a model exported before sqrt was the default says
// none); one that sets it refuses a model of another.
func TestImportTakesTheModelsNormalization(t *testing.T) {
	raw := normalizeJob(t, learners.NormalizeNone)
	l := raw.model.NewLearner()
	for i := range 300 {
		l.Learn([]learners.Feature{{Hash: learners.HashName("count"), Value: float64(i % 50)}, {Hash: learners.HashName("b"), Value: 1}}, i%50 > 20)
	}
	l.Sync()
	var exported bytes.Buffer
	if err := raw.ExportModel(&exported, "binary"); err != nil {
		t.Fatal(err)
	}
	ev := []learners.Feature{{Hash: learners.HashName("count"), Value: 40}}

	def := normalizeJob(t, "")
	if got := def.model.Config().Normalize; got != learners.NormalizeSqrt {
		t.Fatalf("default job normalize %q", got)
	}
	if err := def.ImportModel(bytes.NewReader(exported.Bytes())); err != nil {
		t.Fatal(err)
	}
	if got := def.model.Config().Normalize; got != learners.NormalizeNone {
		t.Errorf("after the import normalize %q, want none", got)
	}
	if p, want := def.model.Predict(ev), raw.model.Predict(ev); p != want {
		t.Errorf("imported model predicts %v, exported %v", p, want)
	}

	explicit := normalizeJob(t, learners.NormalizeSqrt)
	var me *runtime.ModelError
	if err := explicit.ImportModel(bytes.NewReader(exported.Bytes())); !errors.As(err, &me) || me.Field != "params.normalize" {
		t.Fatalf("import into a sqrt job: %v, want a ModelError on params.normalize", err)
	}
	if got := explicit.model.Config().Normalize; got != learners.NormalizeSqrt {
		t.Errorf("refused import changed normalize to %q", got)
	}
}
