package runtime

import (
	"encoding/json"
	"net/url"
	"strconv"

	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/learners"
)

// The engine's tests read the kinds' answers as a client does, from their
// JSON: the kind packages import runtime, so these tests cannot import
// them (kinds_test.go registers them from the external test package).

// Message types of the kinds.
const (
	TypePrediction = "prediction"
	TypeMatch      = "match"
)

// section holds the fields the kinds add to a job status.
type section struct {
	Consistency *ConsistencyStatus `json:"consistency"`
	Model       *learners.Snapshot `json:"model"`
	Metrics     *learners.Metrics  `json:"metrics"`
	TopK        *TopK              `json:"topk"`
	Join        *JoinStatus        `json:"join"`
}

// sec reads the kind's section of st.
func sec(st JobStatus) section {
	var s section
	b, err := json.Marshal(st.Section)
	if err != nil {
		panic(err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		panic(err)
	}
	return s
}

// The kinds' answers, as the client package reads them.
type (
	TopK       = client.TopK
	JoinStatus = client.Matches
)

// queryInto runs a query and decodes its answer into out.
func queryInto(j *Job, name string, q url.Values, out any) error {
	v, err := j.Query(name, q, "")
	if err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// TopK runs query topk.
func (j *Job) TopK(window string, k int) (TopK, error) {
	var t TopK
	err := queryInto(j, "topk", url.Values{"window": {window}, "k": {strconv.Itoa(k)}}, &t)
	return t, err
}

// Matches runs query matches.
func (j *Job) Matches(window string, limit int) (JoinStatus, error) {
	var m JoinStatus
	err := queryInto(j, "matches", url.Values{"window": {window}, "limit": {strconv.Itoa(limit)}}, &m)
	return m, err
}
