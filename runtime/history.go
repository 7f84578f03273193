package runtime

import (
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"strconv"
	"time"
)

// HistoryLen is how many one-second points of a job's recent stats the
// engine keeps: ten minutes. It bounds the history's memory to about
// HistoryLen × 80 bytes per job, whatever the job does.
const HistoryLen = 600

// HistoryPoint is one second of a job's stats as its status reported
// them then: rates and latency quantiles over the sampling window, the
// queue depth and the group scheduling at that moment.
type HistoryPoint struct {
	At            int64   `json:"ts"` // Unix ms
	Accepted      float64 `json:"accepted_per_s"`
	Processed     float64 `json:"processed_per_s"`
	P50           float64 `json:"p50_ms"`
	P99           float64 `json:"p99_ms"`
	QueueDepth    int64   `json:"queue_depth"`
	GroupSize     float64 `json:"group_size"`
	Overhead      float64 `json:"overhead"`
	TotalOverhead float64 `json:"total_overhead"`
	// FT is the job's fault tolerance then (jobs with a ft section).
	FT *HistoryFT `json:"ft,omitempty"`
	// Kind holds the values of the kind's own series, in the order of
	// Job.HistorySeries (kinds that chart; null for one with no value yet).
	Kind []ChartValue `json:"kind,omitempty"`
}

// HistoryFT is a job's fault tolerance in one history point: its state's
// divergence and θ (summed over units, as the status' divergence is), and
// the backups written since the job started, in count and bytes.
type HistoryFT struct {
	Divergence  float64 `json:"divergence"`
	Theta       float64 `json:"theta"`
	Backups     int64   `json:"backups"`
	BackupBytes int64   `json:"backup_bytes"`
}

// ChartValue is one value of a kind's series: null in JSON when NaN
// (nothing to show yet), which JSON has no number for.
type ChartValue float64

func (v ChartValue) MarshalJSON() ([]byte, error) {
	f := float64(v)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// UnmarshalJSON reads null as NaN, as MarshalJSON wrote it.
func (v *ChartValue) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*v = ChartValue(math.NaN())
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	*v = ChartValue(f)
	return err
}

// history is a ring of the last HistoryLen points; its sampler's mutex
// guards it.
type history struct {
	points []HistoryPoint // grows to HistoryLen, then wraps
	next   int
	// savedAt is when the points were last written to the job's storage.
	savedAt time.Time
}

func (h *history) add(p HistoryPoint) {
	if len(h.points) < HistoryLen {
		h.points = append(h.points, p)
		return
	}
	h.points[h.next] = p
	h.next = (h.next + 1) % HistoryLen
}

// oldestFirst copies the points in time order.
func (h *history) oldestFirst() []HistoryPoint {
	out := make([]HistoryPoint, 0, len(h.points))
	out = append(out, h.points[h.next:]...)
	return append(out, h.points[:h.next]...)
}

// point is what the status would have said at sample x.
func (x sample) point(r Rates, l Latency) HistoryPoint {
	p := HistoryPoint{At: x.at.UnixMilli(), Accepted: r.Accepted, Processed: r.Processed, P50: l.P50, P99: l.P99, QueueDepth: x.depth}
	if x.group != nil {
		p.GroupSize, p.Overhead, p.TotalOverhead = sig3(x.group.Size), x.group.Overhead, x.group.TotalOverhead
	}
	p.FT = x.ft
	if len(x.kind) > 0 {
		p.Kind = make([]ChartValue, len(x.kind))
		for i, v := range x.kind {
			p.Kind[i] = ChartValue(sig3(v))
		}
	}
	return p
}

// History returns the job's recent stats, one point a second, oldest
// first: at most HistoryLen points, none older than the job.
func (j *Job) History() []HistoryPoint {
	return j.samples.history()
}

// HistorySeries names the kind's own values in each history point (Kind),
// or is nil when the kind has none.
func (j *Job) HistorySeries() []string {
	if c, ok := j.kind.instance().(Charting); ok {
		return c.ChartSeries()
	}
	return nil
}

// HistoryInterval is the time between two history points.
const HistoryInterval = time.Second

// A job with fault tolerance keeps its history across restarts: in the
// job file historyFile of its storage (checksummed, as the recovery
// history is), written every historySaveEvery and at a graceful stop, and
// read back at its start. A crash loses at most the last
// historySaveEvery of it; the gap shows in the points' times. A job
// without fault tolerance keeps nothing on disk and starts its history
// afresh.
const (
	historyFile      = "history.json"
	historySaveEvery = 10 * time.Second
)

// saveHistoryDue writes the history when it was last written
// historySaveEvery before now.
func (j *Job) saveHistoryDue(now time.Time) {
	if j.ft == nil {
		return
	}
	s := &j.samples
	s.mu.Lock()
	due := now.Sub(s.hist.savedAt) >= historySaveEvery
	if due {
		s.hist.savedAt = now
	}
	s.mu.Unlock()
	if due {
		j.saveHistory()
	}
}

// saveHistory writes the history to the job's storage; failing to only
// logs (the history is for people).
func (j *Job) saveHistory() {
	if j.ft == nil {
		return
	}
	data, err := json.Marshal(j.History())
	if err == nil {
		err = j.ft.writeHistory(data)
	}
	if err != nil {
		j.ft.log.Warn("writing the chart history", "job", j.spec.Name, "err", err)
	}
}

// loadHistory reads the history a previous run of the job wrote, before
// its first sample. Points of another shape of the kind's series (their
// count) lose those series; a damaged file is logged and passed over.
func (j *Job) loadHistory() {
	if j.ft == nil {
		return
	}
	data, _, err := j.ft.storage.ReadMeta(historyFile)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var points []HistoryPoint
	if err == nil {
		err = json.Unmarshal(data, &points)
	}
	if err != nil {
		j.ft.log.Warn("damaged chart history: starting a new one", "job", j.spec.Name, "err", err)
		return
	}
	series := len(j.HistorySeries())
	for i := range points {
		if len(points[i].Kind) != series {
			points[i].Kind = nil
		}
	}
	s := &j.samples
	s.mu.Lock()
	for _, p := range points[max(len(points)-HistoryLen, 0):] {
		s.hist.add(p)
	}
	s.mu.Unlock()
}
