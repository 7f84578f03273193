package client

import (
	"encoding/json"
	"time"
)

// The answer types hold the fields most programs read; Raw, where there is
// one, is the whole JSON answer for everything else (per-partition
// statistics, fault tolerance, coordination, ...).

// Ingested is the answer to PostEvents: every event was queued.
type Ingested struct {
	Accepted int `json:"accepted"`
	// Shed counts, per job with load shedding, the accepted events it
	// dropped to keep its queueing delay bounded.
	Shed map[string]uint64 `json:"shed,omitempty"`
}

// JobSpec declares a job (PutJob). Kind is logreg, heavy_hitters, distinct
// or join; Params, FT, Sync and Shed take what the server's job
// documentation lists (a map, a struct or json.RawMessage); nil ones are
// left out, so the server's defaults apply.
type JobSpec struct {
	Name       string         `json:"name"`
	Kind       string         `json:"kind"`
	Input      string         `json:"input,omitempty"`
	Left       string         `json:"left,omitempty"`
	Right      string         `json:"right,omitempty"`
	Partitions int            `json:"partitions,omitempty"`
	QueueSize  int            `json:"queue_size,omitempty"`
	Params     map[string]any `json:"params,omitempty"`
	FT         any            `json:"ft,omitempty"`
	Sync       any            `json:"sync,omitempty"`
	Shed       any            `json:"shed,omitempty"`
	// Autoscale lets the job set its own partition count (nil: off).
	Autoscale *Autoscale `json:"autoscale,omitempty"`
}

// Autoscale is a job's autoscaler: partitions = ceil(input rate ÷ (true
// rate per partition × TargetUtilization)) within [Min, Max], at most one
// rescale per Cooldown. Zero fields take the server's defaults (1,
// GOMAXPROCS, 0.7, "30s").
type Autoscale struct {
	Min               int     `json:"min,omitempty"`
	Max               int     `json:"max,omitempty"`
	TargetUtilization float64 `json:"target_utilization,omitempty"`
	Cooldown          string  `json:"cooldown,omitempty"`
}

// Elastic is a job's partition layout: its count, its rescales, the
// autoscaler's decisions (Raw of the status has them in full) and how
// evenly its partitions are loaded.
type Elastic struct {
	Partitions    int       `json:"partitions"`
	MaxPartitions int       `json:"max_partitions"`
	Generation    uint64    `json:"generation"`
	Rescales      uint64    `json:"rescales"`
	Last          []Rescale `json:"last,omitempty"`
	Skew          *struct {
		Imbalance float64   `json:"imbalance"`
		Loads     []float64 `json:"loads"`
		HotKeys   []struct {
			Key       string `json:"key"`
			Estimate  uint64 `json:"estimate"`
			Partition int    `json:"partition"`
		} `json:"hot_keys,omitempty"`
	} `json:"skew,omitempty"`
}

// Rescale is one change of a job's partition count (also the rescale
// WebSocket message's): Reason is "api" or the autoscaler's.
type Rescale struct {
	From    int       `json:"from"`
	To      int       `json:"to"`
	At      time.Time `json:"at"`
	Reason  string    `json:"reason"`
	PauseMs float64   `json:"pause_ms"`
	// DrainMs, MoveMs and BackupMs are parts of the pause: the queues (a
	// cluster: the partitions' backups) catching up, the state moving,
	// the new layout's state written.
	DrainMs    float64 `json:"drain_ms"`
	MoveMs     float64 `json:"move_ms"`
	BackupMs   float64 `json:"backup_ms"`
	Generation uint64  `json:"generation"`
}

// JobStatus is a job's live status (Job, Jobs, PutJob, stats messages).
type JobStatus struct {
	Name          string    `json:"name"`
	Kind          string    `json:"kind"`
	Input         string    `json:"input,omitempty"`
	Streams       []string  `json:"streams"`
	Created       time.Time `json:"created"`
	Accepted      uint64    `json:"accepted"`
	Processed     uint64    `json:"processed"`
	QueueDepth    int64     `json:"queue_depth"`
	QueueCapacity int64     `json:"queue_capacity"`
	Rates         struct {
		Accepted  float64 `json:"accepted_per_s"`
		Processed float64 `json:"processed_per_s"`
	} `json:"rates"`
	Latency struct {
		P50  float64 `json:"p50_ms"`
		P95  float64 `json:"p95_ms"`
		P99  float64 `json:"p99_ms"`
		Mean float64 `json:"mean_ms"`
	} `json:"latency"`
	// Metrics of a logreg job; Model its global model (no weights).
	Metrics *ModelMetrics `json:"metrics,omitempty"`
	// TopK, Distinct and Join: the current window of a heavy_hitters,
	// distinct or join job.
	TopK     *TopK     `json:"topk,omitempty"`
	Distinct *Distinct `json:"distinct,omitempty"`
	Join     *Matches  `json:"join,omitempty"`
	// Elastic is the job's layout (servers before elastic jobs: nil).
	Elastic *Elastic        `json:"elastic,omitempty"`
	Raw     json.RawMessage `json:"-"`
}

// UnmarshalJSON keeps the whole status in Raw, also where a status is part
// of a larger answer (Jobs, stats messages).
func (s *JobStatus) UnmarshalJSON(b []byte) error {
	type plain JobStatus
	if err := json.Unmarshal(b, (*plain)(s)); err != nil {
		return err
	}
	s.Raw = append(json.RawMessage(nil), b...)
	return nil
}

// Prediction is the probability of the positive class for one event.
type Prediction struct {
	Key string  `json:"key,omitempty"`
	P   float64 `json:"p"`
}

// Predictions is the answer to Predict: one prediction per event, in
// order, all from the global model of at least ModelVersion.
type Predictions struct {
	Job          string       `json:"job"`
	ModelVersion uint64       `json:"model_version"`
	Predictions  []Prediction `json:"predictions"`
}

// Measures are progressive-validation measures over a set of events.
type Measures struct {
	Count     int64   `json:"count"`
	Positives int64   `json:"positives"`
	Accuracy  float64 `json:"accuracy"`
	LogLoss   float64 `json:"log_loss"`
	AUC       float64 `json:"auc"`
}

// ModelMetrics are a logreg job's measures over the whole run and over
// the recent window.
type ModelMetrics struct {
	All    Measures `json:"all"`
	Recent Measures `json:"recent"`
}

// Weight is one non-zero weight of a model, by hashed slot; the intercept
// is slot 2^HashBits.
type Weight struct {
	Slot   int     `json:"slot"`
	Weight float64 `json:"weight"`
}

// Model is a logreg job's global model (Model).
type Model struct {
	Job      string       `json:"job"`
	Version  uint64       `json:"version"`
	Updates  uint64       `json:"updates"`
	HashBits int          `json:"hash_bits"`
	NonZero  int          `json:"nonzero_weights"`
	Weights  []Weight     `json:"weights,omitempty"`
	Metrics  ModelMetrics `json:"metrics"`
}

// TopKItem is a heavy hitter: its estimated count and bounds that contain
// the true count.
type TopKItem struct {
	Key      string `json:"key"`
	Estimate uint64 `json:"estimate"`
	Lower    uint64 `json:"lower"`
	Upper    uint64 `json:"upper"`
}

// TopK is a heavy_hitters job's top k of a window (TopK, topk messages).
type TopK struct {
	Job    string `json:"job"`
	Window string `json:"window"`
	// Start and End bound the window in event time (epoch ms); 0 for the
	// whole stream.
	Start int64      `json:"start,omitempty"`
	End   int64      `json:"end,omitempty"`
	Items []TopKItem `json:"items"`
	Total uint64     `json:"total"`
	// MaxUntracked bounds the count of any item not listed.
	MaxUntracked uint64 `json:"max_untracked"`
	Late         uint64 `json:"late"`
	Dropped      uint64 `json:"dropped"`
	Shed         uint64 `json:"shed,omitempty"`
	ExtraWeight  uint64 `json:"extra_weight,omitempty"`
}

// Distinct is a distinct job's count of a window (Distinct, distinct
// messages). Lower and Upper are three standard errors around Estimate.
type Distinct struct {
	Job      string  `json:"job"`
	Window   string  `json:"window"`
	Start    int64   `json:"start,omitempty"`
	End      int64   `json:"end,omitempty"`
	Estimate uint64  `json:"estimate"`
	StdError float64 `json:"std_error"`
	Lower    uint64  `json:"lower"`
	Upper    uint64  `json:"upper"`
	Late     uint64  `json:"late"`
	Dropped  uint64  `json:"dropped"`
}

// Interval is an estimate with its confidence interval.
type Interval struct {
	Estimate float64 `json:"estimate"`
	Low      float64 `json:"low"`
	High     float64 `json:"high"`
}

// JoinEstimate is COUNT, SUM and AVG of a join's window.
type JoinEstimate struct {
	WindowStart int64     `json:"window_start"`
	WindowEnd   int64     `json:"window_end"`
	Count       Interval  `json:"count"`
	Sum         Interval  `json:"sum"`
	Avg         *Interval `json:"avg,omitempty"` // nil while no match
	Sample      float64   `json:"sample"`
	Confidence  float64   `json:"confidence"`
	// Exact: no sampling, eviction or loss; Complete: no eviction.
	Exact    bool `json:"exact"`
	Complete bool `json:"complete"`
}

// Match is one pair found by a join (Matches.Recent, match messages).
type Match struct {
	Key        string  `json:"key"`
	LeftTS     int64   `json:"left_ts"`
	RightTS    int64   `json:"right_ts"`
	LeftValue  float64 `json:"left_value"`
	RightValue float64 `json:"right_value"`
}

// Matches is a join job's view (Matches, join messages).
type Matches struct {
	Job           string          `json:"job,omitempty"`
	Seen          uint64          `json:"seen"`
	Matches       uint64          `json:"matches"`
	Late          uint64          `json:"late"`
	Expired       uint64          `json:"expired"`
	Evicted       uint64          `json:"evicted"`
	MatchRate     float64         `json:"match_rate"`
	StateTuples   int             `json:"state_tuples"`
	StateBytes    int64           `json:"state_bytes"`
	MaxStateBytes int64           `json:"max_state_bytes"`
	Estimate      *JoinEstimate   `json:"estimate,omitempty"`
	Windows       []JoinEstimate  `json:"windows,omitempty"`
	Recent        []Match         `json:"recent"`
	Raw           json.RawMessage `json:"-"`
}

func (m *Matches) keepRaw(b []byte) { m.Raw = b }

// Failover is a partition (or a job's global unit, Partition nil) that
// changed owner in a cluster: From is the node that wrote its state last,
// To the new owner; Graceful when From handed it over. ReplayFrom is the
// log position the new owner replays from; Lost counts log messages that
// retention dropped before the replay.
type Failover struct {
	Partition        *int   `json:"partition,omitempty"`
	From             string `json:"from,omitempty"`
	To               string `json:"to"`
	Token            uint64 `json:"token"`
	Graceful         bool   `json:"graceful"`
	SinceLastWriteMs int64  `json:"since_last_write_ms"`
	TookMs           int64  `json:"took_ms"`
	ReplayFrom       uint64 `json:"replay_from"`
	Lost             uint64 `json:"lost"`
}
