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
	return []runtime.Query{{Name: "model", Params: []string{"weights", "limit", "offset"}, Run: j.modelQuery}}
}

// modelQuery answers model[?weights=true&limit=N&offset=M]. Weights come
// in pages of limit (default 100, at most 10,000) from offset, ordered by
// magnitude then slot; each page is its own snapshot, so on a model still
// learning a weight may move across a page boundary.
func (j *logregJob) modelQuery(q runtime.QueryArgs) (any, error) {
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
