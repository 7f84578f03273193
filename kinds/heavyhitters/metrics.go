package heavyhitters

import (
	"github.com/mlstream/mlstream/kinds/internal/synopsis"
	"github.com/prometheus/client_golang/prometheus"
)

// The kind's Prometheus series: its answer, labelled with the job.
var (
	itemsDesc     = prometheus.NewDesc("mlstream_topk_items", "Items a heavy_hitters job reports in its current window (at most k).", []string{"job"}, nil)
	totalDesc     = prometheus.NewDesc("mlstream_topk_events", "Values counted in a heavy_hitters job's current window (the whole stream without windows).", []string{"job"}, nil)
	untrackedDesc = prometheus.NewDesc("mlstream_topk_max_untracked", "The most any item not reported may have been counted, in the current window.", []string{"job"}, nil)
)

func describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{itemsDesc, totalDesc, untrackedDesc} {
		ch <- d
	}
}

// Collect sends the size of the current top k and its totals
// (runtime.Collecting).
func (j *job) Collect(job string, ch chan<- prometheus.Metric) {
	t := j.topK(synopsis.WindowCurrent, j.k)
	ch <- prometheus.MustNewConstMetric(itemsDesc, prometheus.GaugeValue, float64(len(t.Items)), job)
	ch <- prometheus.MustNewConstMetric(totalDesc, prometheus.GaugeValue, float64(t.Total), job)
	ch <- prometheus.MustNewConstMetric(untrackedDesc, prometheus.GaugeValue, float64(t.MaxUntracked), job)
}
