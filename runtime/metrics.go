package runtime

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the engine's Prometheus series. Counters that ingest bumps
// are plain counter vectors; everything that is a view of a job (queue
// depth, latency, a kind's own series through Collecting) is read at
// scrape time by collect, so the hot path pays nothing for it.
type metrics struct {
	e           *Engine
	acceptedVec *prometheus.CounterVec
	refusedVec  *prometheus.CounterVec
	// acceptedEvents is every stream's accepted events: a request's once,
	// however many jobs read its stream (Engine.AcceptedEvents).
	acceptedEvents atomic.Uint64

	processed, depth, capacity, shed, overdue, latency, wsDropped, wsClients *prometheus.Desc
	groupSize, groupOverhead, heldBack                                       *prometheus.Desc

	partitions, rescales, rescalePause, autoTarget, autoInput, autoTrueRate, autoUtilization, autoNeedsNode, imbalance *prometheus.Desc

	ftDivergence, ftThreshold, ftPending, ftUnacked, ftItemLog, ftBackups, ftBackupBytes, ftFailures, ftWorst, ftPromise, ftLost *prometheus.Desc
}

func newMetrics(e *Engine, reg prometheus.Registerer) *metrics {
	m := &metrics{
		e: e,
		acceptedVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mlstream_events_accepted_total", Help: "Events accepted (answered 202) per stream.",
		}, []string{"stream"}),
		refusedVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mlstream_events_rejected_total", Help: "Events refused per stream and reason: bad_input (400), too_large (413), busy (429), unknown_stream (404), closed (503), timeout (408). Streams no job reads are counted under stream=\"\".",
		}, []string{"stream", "reason"}),
		processed:     prometheus.NewDesc("mlstream_events_processed_total", "Events processed per job.", []string{"job"}, nil),
		shed:          prometheus.NewDesc("mlstream_events_shed_total", "Events dropped by load shedding per job (jobs with a shed section).", []string{"job"}, nil),
		groupSize:     prometheus.NewDesc("mlstream_group_size", "Coordination group size in batches, per partition (Drizzle group scheduling).", []string{"job", "partition"}, nil),
		groupOverhead: prometheus.NewDesc("mlstream_group_overhead_ratio", "Share of the last group's time spent coordinating (0-1), per partition.", []string{"job", "partition"}, nil),
		heldBack:      prometheus.NewDesc("mlstream_senders_held_back", "Ingest requests held back now so that no more than l events wait without an item backup.", []string{"job"}, nil),
		depth:         prometheus.NewDesc("mlstream_queue_depth", "Events queued and not yet processed, per partition.", []string{"job", "partition"}, nil),
		capacity:      prometheus.NewDesc("mlstream_queue_capacity", "Capacity of each partition queue, in events.", []string{"job", "partition"}, nil),
		overdue:       prometheus.NewDesc("mlstream_events_overdue_total", "Events served after waiting longer than shed.max_delay per job (jobs with a shed section).", []string{"job"}, nil),
		latency:       prometheus.NewDesc("mlstream_processing_latency_seconds", "Time from queueing to processed, per event.", []string{"job"}, nil),
		wsClients:     prometheus.NewDesc("mlstream_ws_clients", "Connected WebSocket subscribers.", nil, nil),
		wsDropped:     prometheus.NewDesc("mlstream_ws_dropped_total", "Messages dropped because a subscriber's backlog was full.", nil, nil),

		partitions:      prometheus.NewDesc("mlstream_job_partitions", "Partitions of each job (changed by rescales).", []string{"job"}, nil),
		rescales:        prometheus.NewDesc("mlstream_job_rescales_total", "Rescales of each job (PATCH, PUT or the autoscaler).", []string{"job"}, nil),
		rescalePause:    prometheus.NewDesc("mlstream_job_rescale_pause_seconds", "How long the last rescale held the job's ingest.", []string{"job"}, nil),
		autoTarget:      prometheus.NewDesc("mlstream_autoscale_target_partitions", "The partition count of the autoscaler's last decision.", []string{"job"}, nil),
		autoInput:       prometheus.NewDesc("mlstream_autoscale_input_rate", "Events offered per second at the autoscaler's last decision.", []string{"job"}, nil),
		autoTrueRate:    prometheus.NewDesc("mlstream_autoscale_true_rate", "Events a partition processes per busy second, at the autoscaler's last decision.", []string{"job"}, nil),
		autoUtilization: prometheus.NewDesc("mlstream_autoscale_utilization", "Input rate over partitions times true rate, at the autoscaler's last decision.", []string{"job"}, nil),
		autoNeedsNode:   prometheus.NewDesc("mlstream_autoscale_needs_node", "1 when the autoscaler's last decision found that the cluster needs another node (more partitions needed than its live nodes have cores), else 0.", []string{"job"}, nil),
		imbalance:       prometheus.NewDesc("mlstream_job_partition_imbalance", "Busiest partition's recent load over the mean load (1 = even).", []string{"job"}, nil),

		ftDivergence:  prometheus.NewDesc("mlstream_ft_divergence", "State divergence from the last backup, in the kind's unit.", []string{"job"}, nil),
		ftThreshold:   prometheus.NewDesc("mlstream_ft_threshold", "Current fault-tolerance thresholds: theta (state), l (pending events per partition), gamma (unacknowledged per partition).", []string{"job", "threshold"}, nil),
		ftPending:     prometheus.NewDesc("mlstream_ft_pending", "Events queued without an item backup, per partition.", []string{"job", "partition"}, nil),
		ftUnacked:     prometheus.NewDesc("mlstream_ft_unacked", "Events learned by a partition and not yet merged, per partition.", []string{"job", "partition"}, nil),
		ftItemLog:     prometheus.NewDesc("mlstream_ft_item_log_bytes", "Bytes in the item log, per partition.", []string{"job", "partition"}, nil),
		ftBackups:     prometheus.NewDesc("mlstream_ft_backups_total", "State backups written, by type (full, delta).", []string{"job", "type"}, nil),
		ftBackupBytes: prometheus.NewDesc("mlstream_ft_backup_bytes_total", "Bytes of state backups written.", []string{"job"}, nil),
		ftFailures:    prometheus.NewDesc("mlstream_ft_failures", "Recoveries the thresholds account for (halved once per failure, reset at window ends).", []string{"job"}, nil),
		ftWorst:       prometheus.NewDesc("mlstream_ft_worst_case_events", "Events a crash now would lose at worst.", []string{"job"}, nil),
		ftPromise:     prometheus.NewDesc("mlstream_ft_bound_events", "Events lost at most over any number of crashes (2L + Γ).", []string{"job"}, nil),
		ftLost:        prometheus.NewDesc("mlstream_ft_recovery_lost_events", "Events the last recovery found lost.", []string{"job"}, nil),
	}
	if reg != nil {
		reg.MustRegister(m.acceptedVec, m.refusedVec, m)
	}
	return m
}

// The per-stream series exist only for streams some job reads: a stream
// label is created under the engine's read lock after checking the stream
// is read, and forgetStream deletes the stream's series under its write
// lock when the last reader goes. Events for any other name are counted
// under the one label value unknownStream, so that requests with random
// stream names create no state.
const unknownStream = ""

func (m *metrics) accepted(stream string, n int) {
	m.e.mu.RLock()
	defer m.e.mu.RUnlock()
	m.acceptedVec.WithLabelValues(m.streamLabel(stream)).Add(float64(n))
	m.acceptedEvents.Add(uint64(n))
}

// refused counts events refused with reason (see the metric's help).
func (m *metrics) refused(stream, reason string, n int) {
	m.e.mu.RLock()
	defer m.e.mu.RUnlock()
	m.refusedVec.WithLabelValues(m.streamLabel(stream), reason).Add(float64(n))
}

// streamLabel is stream if a job reads it, else unknownStream. The caller
// holds m.e.mu.
func (m *metrics) streamLabel(stream string) string {
	if len(m.e.mu.streams[stream]) == 0 {
		return unknownStream
	}
	return stream
}

// forgetStream deletes the series of a stream no job reads any more. The
// caller holds m.e.mu for writing.
func (m *metrics) forgetStream(stream string) {
	if stream == unknownStream {
		return
	}
	m.acceptedVec.DeleteLabelValues(stream)
	m.refusedVec.DeletePartialMatch(prometheus.Labels{"stream": stream})
}

// Refused counts events that the api refused before they reached a batch.
func (e *Engine) Refused(stream, reason string, n int) { e.metrics.refused(stream, reason, n) }

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, k := range registered() {
		if k.Describe != nil {
			k.Describe(ch)
		}
	}
	for _, d := range []*prometheus.Desc{m.processed, m.shed, m.overdue, m.depth, m.capacity, m.latency, m.wsClients, m.wsDropped,
		m.groupSize, m.groupOverhead, m.heldBack,
		m.partitions, m.rescales, m.rescalePause, m.autoTarget, m.autoInput, m.autoTrueRate, m.autoUtilization, m.autoNeedsNode, m.imbalance,
		m.ftDivergence, m.ftThreshold, m.ftPending, m.ftUnacked, m.ftItemLog, m.ftBackups, m.ftBackupBytes, m.ftFailures, m.ftWorst, m.ftPromise, m.ftLost} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, j := range m.e.Jobs() {
		name := j.spec.Name
		ch <- prometheus.MustNewConstMetric(m.processed, prometheus.CounterValue, float64(j.processed()), name)
		ch <- prometheus.MustNewConstMetric(m.shed, prometheus.CounterValue, float64(j.shed.shed.Load()), name)
		ch <- prometheus.MustNewConstMetric(m.overdue, prometheus.CounterValue, float64(j.shed.overdue.Load()), name)
		var held int64
		for _, p := range j.parts {
			idx := strconv.Itoa(p.index)
			g := p.group.status()
			held += p.q.heldBack.Load()
			ch <- prometheus.MustNewConstMetric(m.groupSize, prometheus.GaugeValue, g.Size, name, idx)
			ch <- prometheus.MustNewConstMetric(m.groupOverhead, prometheus.GaugeValue, g.Overhead, name, idx)
			ch <- prometheus.MustNewConstMetric(m.depth, prometheus.GaugeValue, float64(p.q.depth.Load()), name, idx)
			ch <- prometheus.MustNewConstMetric(m.capacity, prometheus.GaugeValue, float64(p.q.capacity), name, idx)
		}
		ch <- prometheus.MustNewConstMetric(m.heldBack, prometheus.GaugeValue, float64(held), name)
		s := j.lat.snap()
		ch <- prometheus.MustNewConstHistogram(m.latency, s.total(), float64(s.sumNs)/1e9, s.promBuckets(), name)
		if j.ft != nil {
			m.collectFT(ch, name, j.ft.status(j))
		}
		if c, ok := j.kind.instance().(Collecting); ok {
			c.Collect(name, ch)
		}
		m.collectElastic(ch, j)
	}
	ch <- prometheus.MustNewConstMetric(m.wsClients, prometheus.GaugeValue, float64(m.e.hub.Subscribers()))
	ch <- prometheus.MustNewConstMetric(m.wsDropped, prometheus.CounterValue, float64(m.e.hub.Dropped()))
}

func (m *metrics) collectFT(ch chan<- prometheus.Metric, job string, f *FTStatus) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{job}, labels...)...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append([]string{job}, labels...)...)
	}
	gauge(m.ftDivergence, f.Divergence)
	gauge(m.ftThreshold, f.State.Theta, "theta")
	gauge(m.ftThreshold, float64(f.Partition.L), "l")
	gauge(m.ftThreshold, float64(f.Partition.Gamma), "gamma")
	for _, p := range f.Partitions {
		idx := strconv.Itoa(p.Partition)
		gauge(m.ftPending, float64(p.Pending), idx)
		gauge(m.ftUnacked, float64(p.Unacked), idx)
		gauge(m.ftItemLog, float64(p.ItemLogBytes), idx)
	}
	counter(m.ftBackups, float64(f.Backups.Full), "full")
	counter(m.ftBackups, float64(f.Backups.Delta), "delta")
	counter(m.ftBackupBytes, float64(f.Backups.Bytes))
	gauge(m.ftFailures, float64(f.Failures))
	gauge(m.ftWorst, float64(f.WorstCase.Events))
	gauge(m.ftPromise, float64(f.Promise.Events))
	if f.Recovery != nil {
		gauge(m.ftLost, float64(f.Recovery.Lost))
	}
}

// promBounds are the latency histogram's buckets in /metrics, in seconds:
// a few readable bounds instead of the 41 internal ones.
var promBounds = []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}

// promBuckets folds the internal buckets into promBounds, cumulatively.
// An internal bucket counts under the first readable bound at or above
// its own upper bound, so a count is never under a bound its latencies
// may exceed.
func (s latSnap) promBuckets() map[float64]uint64 {
	out := make(map[float64]uint64, len(promBounds))
	var cum uint64
	i := 0
	for _, b := range promBounds {
		for i < len(latBounds) && latBounds[i] <= b {
			cum += s.counts[i]
			i++
		}
		out[b] = cum
	}
	return out
}

// collectElastic sends a job's series of rescaling and autoscaling.
func (m *metrics) collectElastic(ch chan<- prometheus.Metric, j *Job) {
	name := j.spec.Name
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, name)
	}
	gauge(m.partitions, float64(len(j.parts)))
	es := &j.elastic
	es.mu.Lock()
	total, auto := es.total, es.auto
	var pause float64
	if n := len(es.last); n > 0 {
		pause = es.last[n-1].PauseMs / 1e3
	}
	es.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(m.rescales, prometheus.CounterValue, float64(total), name)
	gauge(m.rescalePause, pause)
	if sk := j.skew(); sk != nil {
		gauge(m.imbalance, sk.Imbalance)
	}
	if auto == nil {
		return
	}
	if d, ok := auto.lastDecision(); ok {
		gauge(m.autoTarget, float64(d.Target))
		gauge(m.autoInput, d.InputRate)
		gauge(m.autoTrueRate, d.TrueRate)
		gauge(m.autoUtilization, d.Utilization)
		needs := 0.0
		if d.NeedsNode {
			needs = 1
		}
		gauge(m.autoNeedsNode, needs)
	}
}
