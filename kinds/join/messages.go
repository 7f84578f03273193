package join

import (
	"strconv"

	"github.com/mlstream/mlstream/joins"
	"github.com/mlstream/mlstream/runtime"
	"github.com/prometheus/client_golang/prometheus"
)

// The join's message types.
const (
	// TypeMatch is one pair found; ts is the later of its two event times.
	TypeMatch = "match"
	// TypeJoin is the join's statistics and the current window's
	// estimates, once a second; ts is when it was published.
	TypeJoin = "join"
)

// MatchMessage is a match message.
type MatchMessage struct {
	runtime.Envelope
	Match joins.Match `json:"match"`
}

// JoinMessage is a join message.
type JoinMessage struct {
	runtime.Envelope
	Join JoinStatus `json:"join"`
}

// AppendMatch encodes a match message without reflection: this runs once
// per pair found while someone watches.
func AppendMatch(b []byte, job string, m *joins.Match) []byte {
	b = runtime.AppendEnvelope(b, TypeMatch, job, max(m.LeftTS, m.RightTS))
	b = append(b, `,"match":{"key":`...)
	b = runtime.AppendJSONString(b, m.Key)
	b = append(b, `,"left_ts":`...)
	b = strconv.AppendInt(b, m.LeftTS, 10)
	b = append(b, `,"right_ts":`...)
	b = strconv.AppendInt(b, m.RightTS, 10)
	b = append(b, `,"left_value":`...)
	b = strconv.AppendFloat(b, m.LeftValue, 'g', -1, 64)
	b = append(b, `,"right_value":`...)
	b = strconv.AppendFloat(b, m.RightValue, 'g', -1, 64)
	return append(b, "}}"...)
}

// The kind's Prometheus series, labelled with the job.
var (
	matchesDesc  = prometheus.NewDesc("mlstream_join_matches_total", "Pairs a join found (with sampling, pairs of sampled tuples).", []string{"job"}, nil)
	tuplesDesc   = prometheus.NewDesc("mlstream_join_tuples_total", "Tuples of a join by outcome: late (dropped, behind the watermark), expired (left the state past the interval), evicted (left it early for max_state).", []string{"job", "outcome"}, nil)
	stateDesc    = prometheus.NewDesc("mlstream_join_state_bytes", "Accounted bytes of a join's buffered tuples and key index.", []string{"job"}, nil)
	maxStateDesc = prometheus.NewDesc("mlstream_join_max_state_bytes", "A join's max_state.", []string{"job"}, nil)
	countDesc    = prometheus.NewDesc("mlstream_join_count_estimate", "A join's COUNT in its current window (the whole stream without windows), with the low and high end of its interval (bound).", []string{"job", "bound"}, nil)
)

func describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{matchesDesc, tuplesDesc, stateDesc, maxStateDesc, countDesc} {
		ch <- d
	}
}

// Collect sends the join's matches, tuples by outcome and state
// (runtime.Collecting).
func (j *joinJob) Collect(job string, ch chan<- prometheus.Metric) {
	js := j.Status(false).(*Status).Join
	ch <- prometheus.MustNewConstMetric(matchesDesc, prometheus.CounterValue, float64(js.Matches), job)
	for outcome, n := range map[string]uint64{"late": js.Late, "expired": js.Expired, "evicted": js.Evicted} {
		ch <- prometheus.MustNewConstMetric(tuplesDesc, prometheus.CounterValue, float64(n), job, outcome)
	}
	ch <- prometheus.MustNewConstMetric(stateDesc, prometheus.GaugeValue, float64(js.StateBytes), job)
	ch <- prometheus.MustNewConstMetric(maxStateDesc, prometheus.GaugeValue, float64(js.MaxStateBytes), job)
	if e := js.Estimate; e != nil {
		for bound, v := range map[string]float64{"estimate": e.Count.Estimate, "low": e.Count.Low, "high": e.Count.High} {
			ch <- prometheus.MustNewConstMetric(countDesc, prometheus.GaugeValue, v, job, bound)
		}
	}
}
