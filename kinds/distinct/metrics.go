package distinct

import (
	"github.com/mlstream/mlstream/kinds/internal/synopsis"
	"github.com/prometheus/client_golang/prometheus"
)

// The kind's Prometheus series: its answer, labelled with the job.
var (
	estimateDesc = prometheus.NewDesc("mlstream_distinct_estimate", "A distinct job's estimate of distinct values, in the current window (the whole stream without windows), with its lower and upper bound (bound).", []string{"job", "bound"}, nil)
)

func describe(ch chan<- *prometheus.Desc) { ch <- estimateDesc }

// Collect sends the current window's estimate and bounds
// (runtime.Collecting).
func (j *job) Collect(job string, ch chan<- prometheus.Metric) {
	c := j.count(synopsis.WindowCurrent)
	for bound, v := range map[string]uint64{"estimate": c.Estimate, "lower": c.Lower, "upper": c.Upper} {
		ch <- prometheus.MustNewConstMetric(estimateDesc, prometheus.GaugeValue, float64(v), job, bound)
	}
}
