package logreg

import (
	"strconv"

	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
	"github.com/prometheus/client_golang/prometheus"
)

// Ranges of params: they keep one job from asking for more than a machine
// has; within them, the engine's memory budget decides.
const (
	maxHashBits     = 26 // 2^26 slots of 32 bytes, 2 GiB
	maxLogregWindow = 1_000_000
)

// Bytes behind the memory estimate, measured on amd64 (the runtime's
// budget tests compare them with the heap).
const (
	// slotBytes is a model slot: four float64 words.
	slotBytes = 32
	// partBytes is a partition's learner: its local delta at its initial
	// 4,096 entries of 32 bytes and scratch.
	partBytes = 4096*32 + 2048*4 + 64*40
	// deltaSlots is how many slots a partition's delta is assumed to grow
	// to between merges (it grows with the slots touched, at most 4
	// entries per model slot).
	deltaSlots = 1 << 14
	// progressiveBytes is one event of the progressive metrics' window,
	// held twice per partition (its own and the published copy).
	progressiveBytes = 12
)

// memory is the model and the partitions' learners at their largest.
func memory(spec runtime.Spec, p *runtime.Params, withFT bool) (int64, string, error) {
	hb, err := p.Int("hash_bits", learners.DefaultHashBits, 1, maxHashBits)
	if err != nil {
		return 0, "", err
	}
	window, err := p.Int("window", learners.DefaultWindow, 1, maxLogregWindow)
	if err != nil {
		return 0, "", err
	}
	nameSlots, err := p.Int("names_slots", DefaultNameSlots, 0, maxNameSlots)
	if err != nil {
		return 0, "", err
	}
	pending, err := p.Bytes("label_pending_bytes", DefaultLabelPendingBytes, 0, maxLabelPendingBytes)
	if err != nil {
		return 0, "", err
	}
	if withFT {
		// The committed sets share the entries: a map slot each.
		pending += pending / 4
	}
	slots := int64(1)<<hb + 1
	model := slots*slotBytes + min(int64(nameSlots), slots)*nameSlotBytes
	if withFT {
		model += slots / 8 // the tracker's bitmap of slots changed since the backup
	}
	delta := 4 * min(slots, deltaSlots) * 32
	part := partBytes + max(delta-4096*32, 0) + 2*int64(window)*progressiveBytes
	if pending > model {
		return model + int64(spec.Partitions)*part + pending, "params.label_pending_bytes", nil
	}
	return model + int64(spec.Partitions)*part + pending, "params.hash_bits", nil
}

// The kind's Prometheus series, labelled with the job.
var (
	versionDesc = prometheus.NewDesc("mlstream_model_version", "Version of the global model (merges applied).", []string{"job"}, nil)
	skippedDesc = prometheus.NewDesc("mlstream_model_skipped_updates_total", "Updates the model refused because they would have made a weight or an optimizer accumulator infinite or NaN.", []string{"job"}, nil)
	qualityDesc = prometheus.NewDesc("mlstream_model_metric", "Progressive-validation metrics of the model: metric is accuracy, log_loss, auc, or precision, recall or f1 at the decision threshold 0.5; window is all or recent.", []string{"job", "metric", "window"}, nil)
	labelsDesc  = prometheus.NewDesc("mlstream_model_delayed_labels_total", "Delayed labels and the predictions held for them: outcome is held (a prediction with an id kept), joined (a label learned from), unknown (a label with no pending prediction), expired (a pending prediction older than label_ttl), evicted (dropped for label_pending_bytes) or duplicate (a held id held again, the older replaced).", []string{"job", "outcome"}, nil)
	pendingDesc = prometheus.NewDesc("mlstream_model_pending_labels", "Predictions held waiting for their delayed labels: unit is entries or bytes.", []string{"job", "unit"}, nil)
	driftsDesc  = prometheus.NewDesc("mlstream_model_drifts_total", "Drifts the job's Page-Hinkley detectors found in the per-event log loss (all partitions).", []string{"job"}, nil)
	calibDesc   = prometheus.NewDesc("mlstream_model_calibration", "Calibration table of the model: for the events predicted in [lo, hi), stat is count, mean_predicted or observed_rate (of positives); window is all or recent.", []string{"job", "window", "lo", "hi", "stat"}, nil)
)

func describe(ch chan<- *prometheus.Desc) {
	ch <- versionDesc
	ch <- skippedDesc
	ch <- qualityDesc
	ch <- calibDesc
	ch <- driftsDesc
	ch <- labelsDesc
	ch <- pendingDesc
}

// Collect sends the model's version, skipped updates and progressive
// metrics (runtime.Collecting).
func (j *logregJob) Collect(job string, ch chan<- prometheus.Metric) {
	st := j.Status(false).(*Status)
	ch <- prometheus.MustNewConstMetric(versionDesc, prometheus.GaugeValue, float64(st.Model.Version), job)
	ch <- prometheus.MustNewConstMetric(skippedDesc, prometheus.CounterValue, float64(st.Model.Skipped), job)
	ch <- prometheus.MustNewConstMetric(driftsDesc, prometheus.CounterValue, float64(st.Drift.Drifts), job)
	collectLabels(job, st.Labels, ch)
	collectMeasures(job, "all", &st.Metrics.All, ch)
	collectMeasures(job, "recent", &st.Metrics.Recent, ch)
}

func collectMeasures(job, win string, m *learners.Measures, ch chan<- prometheus.Metric) {
	for _, w := range []struct {
		name string
		v    float64
	}{
		{"accuracy", m.Accuracy}, {"log_loss", m.LogLoss}, {"auc", m.AUC},
		{"precision", m.Precision}, {"recall", m.Recall}, {"f1", m.F1},
	} {
		ch <- prometheus.MustNewConstMetric(qualityDesc, prometheus.GaugeValue, w.v, job, w.name, win)
	}
	for _, c := range m.Calibration {
		lo, hi := strconv.FormatFloat(c.Lo, 'g', -1, 64), strconv.FormatFloat(c.Hi, 'g', -1, 64)
		ch <- prometheus.MustNewConstMetric(calibDesc, prometheus.GaugeValue, float64(c.Count), job, win, lo, hi, "count")
		ch <- prometheus.MustNewConstMetric(calibDesc, prometheus.GaugeValue, c.MeanPredicted, job, win, lo, hi, "mean_predicted")
		ch <- prometheus.MustNewConstMetric(calibDesc, prometheus.GaugeValue, c.ObservedRate, job, win, lo, hi, "observed_rate")
	}
}

func collectLabels(job string, l *LabelStatus, ch chan<- prometheus.Metric) {
	for _, o := range []struct {
		name string
		n    int64
	}{{"held", l.Held}, {"joined", l.Joined}, {"unknown", l.Unknown}, {"expired", l.Expired}, {"evicted", l.Evicted}, {"duplicate", l.Duplicates}} {
		ch <- prometheus.MustNewConstMetric(labelsDesc, prometheus.CounterValue, float64(o.n), job, o.name)
	}
	ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(l.Pending), job, "entries")
	ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(l.PendingBytes), job, "bytes")
}
