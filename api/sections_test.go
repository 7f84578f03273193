package api

import (
	"net/http"
	"testing"
)

// A synopsis job's status section names its job, as its query does,
// rather than "job": "".
func TestSynopsisStatusNamesItsJob(t *testing.T) {
	ts := newTestServer(t)
	ts.putJob("hh", `{"kind":"heavy_hitters","input":"s","params":{"field":"item"}}`)
	ts.putJob("dc", `{"kind":"distinct","input":"s","params":{"field":"item"}}`)
	for job, section := range map[string]string{"hh": "topk", "dc": "distinct"} {
		code, _, st := ts.do("GET", "/v1/jobs/"+job, "", nil)
		sec, _ := st[section].(map[string]any)
		if code != http.StatusOK || sec["job"] != job {
			t.Errorf("GET %s: %d, section %s %v; want its job %q", job, code, section, sec, job)
		}
	}
}
