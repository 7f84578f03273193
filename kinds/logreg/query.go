package logreg

import (
	"maps"
	"math"
	"net/url"
	"strconv"

	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
)

// Paging of a model's weights.
const (
	DefaultWeightsLimit = 100
	MaxWeightsLimit     = 10000
)

// ModelView is the body of the model query: the global model, its
// progressive metrics and, with weights, one page of them.
type ModelView struct {
	Job string `json:"job"`
	learners.Snapshot
	Metrics learners.Metrics `json:"metrics"`
	// Offset is where this page starts in the ordered weights.
	Offset int `json:"offset,omitempty"`
	// Next is the URL of the next page; absent on the last one.
	Next string `json:"next,omitempty"`
	// NextOffset is the offset of the next page; absent on the last one.
	NextOffset int `json:"next_offset,omitempty"`
}

// Queries: model (GET /v1/jobs/{job}/model, or /query/model).
func (j *logregJob) Queries() []runtime.Query {
	return []runtime.Query{{Name: "model", Params: []string{"weights", "limit", "offset", "top"}, Run: j.modelQuery}}
}

// MaxTop is the most weights ?top= lists.
const MaxTop = 1000

// TopView is the body of the model query with ?top=N: the strongest
// weights by feature name.
type TopView struct {
	Job     string      `json:"job"`
	Version uint64      `json:"version"`
	Top     []TopWeight `json:"top"`
	// NamesSampled says how the names' counts were taken: 1 event in N.
	NamesSampled int `json:"names_sampled_every"`
	// UntrackedNames counts names not recorded because the dictionary was
	// full (params.names_slots).
	UntrackedNames uint64 `json:"untracked_names"`
}

// TopWeight is one strong weight with the names seen at its slot, the
// most frequent first. Collision is true when several were.
type TopWeight struct {
	Slot      int         `json:"slot"`
	Weight    float64     `json:"weight"`
	Sign      string      `json:"sign"`
	Names     []NameCount `json:"names"`
	Collision bool        `json:"collision,omitempty"`
}

// topQuery answers model?top=N.
func (j *logregJob) topQuery(q runtime.QueryArgs, n int) (any, error) {
	snap := j.model.Snapshot(true, n)
	v := TopView{Job: q.Job, Version: snap.Version, Top: make([]TopWeight, len(snap.Weights)), NamesSampled: namesEvery}
	for i, w := range snap.Weights {
		t := TopWeight{Slot: w.Slot, Weight: w.Weight, Sign: "+", Names: j.names.names(w.Slot)}
		if w.Weight < 0 {
			t.Sign = "-"
		}
		if w.Slot == j.model.BiasSlot() {
			t.Names = []NameCount{{Name: "(intercept)"}}
		}
		t.Collision = len(t.Names) > 1
		v.Top[i] = t
	}
	j.names.mu.Lock()
	v.UntrackedNames = j.names.untracked
	j.names.mu.Unlock()
	return v, nil
}

// modelQuery answers model[?weights=true&limit=N&offset=M]. Weights come
// in pages of limit (default 100, at most 10,000) from offset, ordered by
// magnitude then slot; each page is its own snapshot, so on a model still
// learning a weight may move across a page boundary.
func (j *logregJob) modelQuery(q runtime.QueryArgs) (any, error) {
	if q.Params.Has("top") {
		top, err := runtime.QueryInt(q.Params, "top", 20, 1, MaxTop)
		if err != nil {
			return nil, err
		}
		return j.topQuery(q, top)
	}
	weights, err := runtime.QueryBool(q.Params, "weights", false)
	if err != nil {
		return nil, err
	}
	limit, err := runtime.QueryInt(q.Params, "limit", DefaultWeightsLimit, 1, MaxWeightsLimit)
	if err != nil {
		return nil, err
	}
	offset, err := runtime.QueryInt(q.Params, "offset", 0, 0, math.MaxInt32)
	if err != nil {
		return nil, err
	}
	m := ModelView{Job: q.Job, Snapshot: j.model.Snapshot(weights, offset+limit), Metrics: j.metrics()}
	if !weights {
		return m, nil
	}
	// Cut the page [offset, offset+limit) out of the first offset+limit
	// weights and link the next page.
	m.Offset = offset
	m.Weights = m.Weights[min(offset, len(m.Weights)):]
	if next := offset + limit; next < m.NonZero {
		u := url.Values(maps.Clone(q.Params))
		u.Set("offset", strconv.Itoa(next))
		u.Set("limit", strconv.Itoa(limit))
		m.NextOffset = next
		m.Next = q.Path + "?" + u.Encode()
	}
	return m, nil
}
