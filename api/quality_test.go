package api

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/mlstream/mlstream/kinds/logreg"
)

// A logreg job's status and /metrics carry precision, recall, F1 and the
// calibration table, consistent with the counts at the threshold.
func TestLogregDecisionMetrics(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("spam", logregSpec)
	const n = 2000
	ts.feed("mail", genBody(7, n), 500, "spam")
	waitFor(t, "progressive validation of every event", 10*time.Second, func() bool {
		return logreg.StatusOf(ts.job("spam")).Metrics.All.Count == n
	})
	m := logreg.StatusOf(ts.job("spam")).Metrics.All
	if m.TP+m.FP+m.FN+m.TN != n || m.TP+m.FN != m.Positives {
		t.Fatalf("counts at the threshold do not add up: %+v", m)
	}
	if m.TP == 0 || m.Precision <= 0.5 || m.Recall <= 0.3 || math.Abs(m.F1-2*m.Precision*m.Recall/(m.Precision+m.Recall)) > 1e-9 {
		t.Fatalf("a learning model on the generator: precision %v recall %v f1 %v", m.Precision, m.Recall, m.F1)
	}
	var binned int64
	for _, c := range m.Calibration {
		binned += c.Count
		if c.Count > 100 && math.Abs(c.MeanPredicted-c.ObservedRate) > 0.25 {
			t.Errorf("bin [%v,%v) badly calibrated: %+v", c.Lo, c.Hi, c)
		}
	}
	if binned != n {
		t.Fatalf("calibration holds %d events of %d", binned, n)
	}
	for _, metric := range []string{"precision", "recall", "f1"} {
		series := fmt.Sprintf(`mlstream_model_metric{job="spam",metric="%s",window="all"}`, metric)
		if v := ts.counter(series); v <= 0 || v > 1 {
			t.Errorf("%s = %v", series, v)
		}
	}
	if v := ts.counter(`mlstream_model_calibration{hi="0.1",job="spam",lo="0",stat="count",window="all"}`); v != float64(m.Calibration[0].Count) {
		t.Errorf("calibration count of bin 0 in /metrics %v, status %d", v, m.Calibration[0].Count)
	}
}
