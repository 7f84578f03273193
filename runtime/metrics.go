package runtime

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the engine's Prometheus series. Counters that ingest bumps
// are plain counter vectors; everything that is a view of a job (queue
// depth, latency, model metrics) is read at scrape time by collect, so the
// hot path pays nothing for it.
type metrics struct {
	e           *Engine
	acceptedVec *prometheus.CounterVec
	refusedVec  *prometheus.CounterVec

	processed, depth, capacity, shed, version, quality, latency, wsDropped, wsClients *prometheus.Desc
}

func newMetrics(e *Engine, reg prometheus.Registerer) *metrics {
	m := &metrics{
		e: e,
		acceptedVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mlstream_events_accepted_total", Help: "Events accepted (answered 202) per stream.",
		}, []string{"stream"}),
		refusedVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mlstream_events_rejected_total", Help: "Events refused per stream and reason: bad_input (400), too_large (413), busy (429), unknown_stream (404), closed (503).",
		}, []string{"stream", "reason"}),
		processed: prometheus.NewDesc("mlstream_events_processed_total", "Events processed per job.", []string{"job"}, nil),
		shed:      prometheus.NewDesc("mlstream_events_shed_total", "Events dropped by load shedding per job (shedding is not enabled in this version: always 0).", []string{"job"}, nil),
		depth:     prometheus.NewDesc("mlstream_queue_depth", "Events queued and not yet processed, per partition.", []string{"job", "partition"}, nil),
		capacity:  prometheus.NewDesc("mlstream_queue_capacity", "Capacity of each partition queue, in events.", []string{"job", "partition"}, nil),
		latency:   prometheus.NewDesc("mlstream_processing_latency_seconds", "Time from queueing to processed, per event.", []string{"job"}, nil),
		version:   prometheus.NewDesc("mlstream_model_version", "Version of the global model (merges applied).", []string{"job"}, nil),
		quality:   prometheus.NewDesc("mlstream_model_metric", "Progressive-validation metrics of the model: metric is accuracy, log_loss or auc; window is all or recent.", []string{"job", "metric", "window"}, nil),
		wsClients: prometheus.NewDesc("mlstream_ws_clients", "Connected WebSocket subscribers.", nil, nil),
		wsDropped: prometheus.NewDesc("mlstream_ws_dropped_total", "Messages dropped because a subscriber's backlog was full.", nil, nil),
	}
	if reg != nil {
		reg.MustRegister(m.acceptedVec, m.refusedVec, m)
	}
	return m
}

func (m *metrics) accepted(stream string, n int) {
	m.acceptedVec.WithLabelValues(stream).Add(float64(n))
}

// refused counts events refused with reason (see the metric's help).
func (m *metrics) refused(stream, reason string, n int) {
	m.refusedVec.WithLabelValues(stream, reason).Add(float64(n))
}

// Refused counts events that the api refused before they reached a batch.
func (e *Engine) Refused(stream, reason string, n int) { e.metrics.refused(stream, reason, n) }

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.processed, m.shed, m.depth, m.capacity, m.latency, m.version, m.quality, m.wsClients, m.wsDropped} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, j := range m.e.Jobs() {
		name := j.spec.Name
		ch <- prometheus.MustNewConstMetric(m.processed, prometheus.CounterValue, float64(j.processed()), name)
		ch <- prometheus.MustNewConstMetric(m.shed, prometheus.CounterValue, 0, name)
		for _, p := range j.parts {
			idx := strconv.Itoa(p.index)
			ch <- prometheus.MustNewConstMetric(m.depth, prometheus.GaugeValue, float64(p.q.depth.Load()), name, idx)
			ch <- prometheus.MustNewConstMetric(m.capacity, prometheus.GaugeValue, float64(p.q.capacity), name, idx)
		}
		s := j.lat.snap()
		buckets := make(map[float64]uint64, len(latBounds))
		var cum uint64
		for i, b := range latBounds {
			cum += s.counts[i]
			buckets[b] = cum
		}
		ch <- prometheus.MustNewConstHistogram(m.latency, s.total(), float64(s.sumNs)/1e9, buckets, name)
		st := JobStatus{}
		j.kind.status(&st, false)
		if st.Model != nil {
			ch <- prometheus.MustNewConstMetric(m.version, prometheus.GaugeValue, float64(st.Model.Version), name)
		}
		if st.Metrics != nil {
			for _, w := range []struct {
				name string
				v    float64
				win  string
			}{
				{"accuracy", st.Metrics.All.Accuracy, "all"}, {"log_loss", st.Metrics.All.LogLoss, "all"}, {"auc", st.Metrics.All.AUC, "all"},
				{"accuracy", st.Metrics.Recent.Accuracy, "recent"}, {"log_loss", st.Metrics.Recent.LogLoss, "recent"}, {"auc", st.Metrics.Recent.AUC, "recent"},
			} {
				ch <- prometheus.MustNewConstMetric(m.quality, prometheus.GaugeValue, w.v, name, w.name, w.win)
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(m.wsClients, prometheus.GaugeValue, float64(m.e.hub.Subscribers()))
	ch <- prometheus.MustNewConstMetric(m.wsDropped, prometheus.CounterValue, float64(m.e.hub.Dropped()))
}
