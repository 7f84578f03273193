// Package kindtest_test shows that a job kind is one package plus one
// registration: it defines a fifth kind, "count" (events per key), which
// nothing outside this file knows, and runs it end to end over HTTP.
package kindtest_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlstream/mlstream/api"
	"github.com/mlstream/mlstream/runtime"
	"github.com/mlstream/mlstream/web"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fastjson"
)

// countKind counts events per key; its one query, "count", answers the
// count of one key or of all.
type countKind struct {
	field string
	mu    sync.Mutex
	n     map[string]int64
}

var countDesc = prometheus.NewDesc("mlstream_test_count_keys", "Keys a count job has seen.", []string{"job"}, nil)

func init() {
	runtime.Register(runtime.Kind{
		Name: "count",
		New: func(spec runtime.Spec, p *runtime.Params) (runtime.Instance, error) {
			field, err := p.Field("key_field", "key")
			if err != nil {
				return nil, err
			}
			return &countKind{field: field, n: map[string]int64{}}, nil
		},
		Divergence: 1,
		Describe:   func(ch chan<- *prometheus.Desc) { ch <- countDesc },
	})
}

func (c *countKind) Extract(v *fastjson.Value, rec *runtime.Record, a *runtime.Arena, now int64) error {
	key, err := runtime.ExtractKey(v, c.field, a)
	if err != nil {
		return err
	}
	if key == "" {
		return runtime.BadField(c.field, "required")
	}
	rec.Key = key
	return nil
}

func (c *countKind) NewPartition(int, runtime.Emitter) runtime.Operator { return countOp{c} }

type countStatus struct {
	Keys int `json:"count_keys"`
}

func (c *countKind) Status(bool) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return countStatus{Keys: len(c.n)}
}

func (c *countKind) Queries() []runtime.Query {
	return []runtime.Query{{Name: "count", Params: []string{"key"}, Run: func(q runtime.QueryArgs) (any, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if k := q.Params.Get("key"); k != "" {
			return map[string]int64{k: c.n[k]}, nil
		}
		return c.n, nil
	}}}
}

func (c *countKind) Collect(job string, ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(countDesc, prometheus.GaugeValue, float64(len(c.n)), job)
}

// countOp is a partition's operator: partitions share the map (a test
// kind; a real one keeps per-partition state and merges).
type countOp struct{ c *countKind }

func (o countOp) Process(recs []runtime.Record, _ bool) {
	o.c.mu.Lock()
	defer o.c.mu.Unlock()
	for _, r := range recs {
		o.c.n[r.Key]++
	}
}
func (o countOp) Coordinate()                     {}
func (o countOp) Idle(bool) (again time.Duration) { return 0 }

// serve runs an engine and its API (with the dashboard) on a real HTTP
// server; do sends one request and returns the status and body.
func serve(t *testing.T) (url string, do func(method, path, body string) (int, string)) {
	t.Helper()
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := runtime.NewEngine(runtime.Config{Partitions: 2, Registry: reg, Logger: log})
	s := api.New(api.Config{Engine: e, Gatherer: reg, Registerer: reg, Logger: log, Dashboard: web.Handler(http.NotFoundHandler())})
	s.SetReady(true)
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.Close(ctx)
	})
	return hs.URL, func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/x-ndjson")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
}

func TestFifthKindEndToEnd(t *testing.T) {
	_, do := serve(t)

	if code, body := do("PUT", "/v1/jobs/c", `{"kind":"count","input":"s"}`); code != http.StatusCreated {
		t.Fatalf("PUT: %d %s", code, body)
	}
	if code, body := do("PUT", "/v1/jobs/d", `{"kind":"count","input":"s","params":{"nope":1}}`); code != http.StatusBadRequest || !strings.Contains(body, "params.nope") {
		t.Fatalf("unknown param: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/streams/s/events", "{\"key\":\"a\"}\n{\"key\":\"b\"}\n{\"key\":\"a\"}\n"); code != http.StatusAccepted {
		t.Fatalf("ingest: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/streams/s/events", "{\"key\":\"a\"}\n{\"label\":1}\n"); code != http.StatusBadRequest || !strings.Contains(body, `"field":"key"`) || !strings.Contains(body, `"line":2`) {
		t.Fatalf("event without key: %d %s", code, body)
	}

	var counts map[string]int64
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := do("GET", "/v1/jobs/c/query/count", "")
		if code != http.StatusOK {
			t.Fatalf("query: %d %s", code, body)
		}
		if err := json.Unmarshal([]byte(body), &counts); err != nil {
			t.Fatal(err)
		}
		if counts["a"] == 2 && counts["b"] == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond) // polling the query, with a deadline
	}
	if len(counts) != 2 || counts["a"] != 2 || counts["b"] != 1 {
		t.Fatalf("counts %v, want a=2 b=1", counts)
	}
	if code, body := do("GET", "/v1/jobs/c/query/count?key=a", ""); code != http.StatusOK || body != "{\"a\":2}\n" {
		t.Fatalf("count of a: %d %q", code, body)
	}
	if code, body := do("GET", "/v1/jobs/c/query/count?kye=a", ""); code != http.StatusBadRequest || !strings.Contains(body, `"field":"kye"`) {
		t.Fatalf("unknown query parameter: %d %s", code, body)
	}
	if code, body := do("GET", "/v1/jobs/c/query/topk", ""); code != http.StatusNotFound || !strings.Contains(body, "count") {
		t.Fatalf("unknown query: %d %s", code, body)
	}
	if code, body := do("GET", "/v1/jobs/c/topk", ""); code != http.StatusBadRequest {
		t.Fatalf("alias of another kind's query: %d %s", code, body)
	}

	code, body := do("GET", "/v1/jobs/c", "")
	var st map[string]any
	if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
		t.Fatalf("status: %d %s", code, body)
	}
	if st["kind"] != "count" || st["count_keys"] != 2.0 || st["processed"] != 3.0 {
		t.Fatalf("status: kind %v, count_keys %v, processed %v", st["kind"], st["count_keys"], st["processed"])
	}
	if _, body := do("GET", "/metrics", ""); !strings.Contains(body, `mlstream_test_count_keys{job="c"} 2`) {
		t.Fatalf("metrics lack the kind's series:\n%s", body)
	}
}
