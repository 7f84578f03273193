package learners_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/mlstream/mlstream/learners"
	"github.com/valyala/fastjson"
)

// readSet reads a labelled NDJSON set of benchmarks/data and hashes its
// features as a logreg job does: a number under name as (name, v), a
// string v as ("name=v", 1), true as (name, 1).
func readSet(t *testing.T, file string) ([][]learners.Feature, []bool) {
	t.Helper()
	body, err := os.ReadFile("../benchmarks/data/" + file)
	if err != nil {
		t.Skip(err)
	}
	var feats [][]learners.Feature
	var labels []bool
	var p fastjson.Parser
	for line := range bytes.Lines(body) {
		v, err := p.ParseBytes(line)
		if err != nil {
			t.Fatalf("%s line %d: %v", file, len(labels)+1, err)
		}
		var fs []learners.Feature
		v.GetObject("features").Visit(func(k []byte, x *fastjson.Value) {
			switch x.Type() {
			case fastjson.TypeNumber:
				fs = append(fs, learners.Feature{Hash: learners.HashName(string(k)), Value: x.GetFloat64()})
			case fastjson.TypeString:
				fs = append(fs, learners.Feature{Hash: learners.HashNameValue(string(k), string(x.GetStringBytes())), Value: 1})
			case fastjson.TypeTrue:
				fs = append(fs, learners.Feature{Hash: learners.HashName(string(k)), Value: 1})
			}
		})
		feats, labels = append(feats, fs), append(labels, v.GetInt("label") == 1)
	}
	return feats, labels
}

// progressiveAccuracy is the whole-run progressive accuracy of a model of
// cfg learning the events in order, syncing every 1,000 as a partition.
func progressiveAccuracy(t *testing.T, cfg learners.Config, feats [][]learners.Feature, labels []bool) float64 {
	events := make([]labelled, len(feats))
	for i := range feats {
		events[i] = labelled{feats: feats[i], label: labels[i]}
	}
	return runSerial(newModel(t, cfg), events, 1000).All.Accuracy
}

// The default normalization (sqrt) reaches scikit-learn's best online
// pipeline on raw word counts (SGDClassifier on log1p + L2-normalised
// counts, one event at a time: 0.9739 on SpamAssassin, issue 15) and is
// no worse than raw values (normalize none, the default before) on the
// dense real sets.
func TestRealSetsDefaultNormalization(t *testing.T) {
	for _, c := range []struct {
		file string
		min  float64 // the default's accuracy must reach it, 0: none
	}{{"spam_assassin.ndjson", 0.9739}, {"breast_cancer.ndjson", 0}, {"digits.ndjson", 0}} {
		feats, labels := readSet(t, c.file)
		def := progressiveAccuracy(t, learners.Config{}, feats, labels)
		raw := progressiveAccuracy(t, learners.Config{Normalize: learners.NormalizeNone}, feats, labels)
		t.Logf("%s: default %.4f, none %.4f", c.file, def, raw)
		if def < c.min || def < raw {
			t.Errorf("%s: default accuracy %.4f, want >= %.4f and >= none's %.4f", c.file, def, c.min, raw)
		}
	}
}
