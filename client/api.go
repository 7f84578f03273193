package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Content types of request bodies: the server refuses POST and PUT bodies
// without a JSON or NDJSON type.
const (
	ContentNDJSON = "application/x-ndjson"
	ContentJSON   = "application/json"
)

// PostEvents posts NDJSON events (one JSON object a line) to a stream. The
// server accepts or refuses a request whole: on success every event is
// queued for every job that reads the stream. It is retried as the
// RetryPolicy says; a refusal is an *Error (400 names the Line, 1-based in
// ndjson, and the Field; 404: no job reads the stream; 413: too large).
func (c *Client) PostEvents(ctx context.Context, stream string, ndjson []byte) (Ingested, error) {
	return c.postEvents(ctx, &call{}, stream, ndjson)
}

func (c *Client) postEvents(ctx context.Context, cl *call, stream string, ndjson []byte) (Ingested, error) {
	cl.method, cl.path, cl.contentType, cl.body = http.MethodPost, path("streams", stream, "events"), ContentNDJSON, ndjson
	// Every retry of this batch carries the same key: a cluster that
	// stored part of a refused attempt adds only the rest.
	if cl.key == "" {
		cl.key = newIdempotencyKey()
	}
	var out Ingested
	_, err := c.do(ctx, cl, &out)
	return out, err
}

// PutJob declares a job. created is true when the server created it, false
// when the same spec already ran; a different spec under the name is a 409
// *Error, a bad one a 400 *Error naming the Field.
func (c *Client) PutJob(ctx context.Context, spec JobSpec) (created bool, err error) {
	body, err := json.Marshal(spec)
	if err != nil {
		return false, fmt.Errorf("client: encoding the job spec: %w", err)
	}
	status, err := c.do(ctx, &call{method: http.MethodPut, path: path("jobs", spec.Name), contentType: ContentJSON, body: body}, nil)
	return status == http.StatusCreated, err
}

// DeleteJob removes a job once it has processed what it has queued. An
// unknown job is a 404 *Error (also when a retried delete had in fact
// removed it).
func (c *Client) DeleteJob(ctx context.Context, name string) error {
	_, err := c.do(ctx, &call{method: http.MethodDelete, path: path("jobs", name)}, nil)
	return err
}

// Rescale changes a running job's partition count (PATCH, admin scope)
// and returns its status once the new partitions run; asking for the
// count it has changes nothing. A count out of range is a 400 *Error
// naming the field; a cluster's job, a paused one or a kind that cannot
// move its state a 409; a drain longer than the server's rescale timeout
// a 503 (the job unchanged), which is retried.
func (c *Client) Rescale(ctx context.Context, job string, partitions int) (*JobStatus, error) {
	body, err := json.Marshal(map[string]int{"partitions": partitions})
	if err != nil {
		return nil, err
	}
	var out JobStatus
	if _, err := c.do(ctx, &call{method: http.MethodPatch, path: path("jobs", job), contentType: ContentJSON, body: body}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Job returns a job's status.
func (c *Client) Job(ctx context.Context, name string) (*JobStatus, error) {
	var out JobStatus
	if _, err := c.do(ctx, &call{method: http.MethodGet, path: path("jobs", name)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Jobs returns every job's status.
func (c *Client) Jobs(ctx context.Context) ([]JobStatus, error) {
	var out struct {
		Jobs []JobStatus `json:"jobs"`
	}
	if _, err := c.do(ctx, &call{method: http.MethodGet, path: path("jobs")}, &out); err != nil {
		return nil, err
	}
	return out.Jobs, nil
}

// Predict asks a logreg job's global model for the probability of each
// event (encoded as JSON; a json.RawMessage is sent as it is). Labels are
// ignored and nothing is learned.
func (c *Client) Predict(ctx context.Context, job string, events ...any) (*Predictions, error) {
	body, err := NDJSON(events...)
	if err != nil {
		return nil, err
	}
	var out Predictions
	if _, err := c.do(ctx, &call{method: http.MethodPost, path: path("jobs", job, "predict"), contentType: ContentNDJSON, body: body}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ModelOptions select what Model returns.
type ModelOptions struct {
	// Weights asks for the non-zero weights, the largest first, at most
	// Limit of them (0: the server's default, 1000; negative: all).
	Weights bool
	Limit   int
}

// Model returns a logreg job's global model.
func (c *Client) Model(ctx context.Context, job string, opts ModelOptions) (*Model, error) {
	q := url.Values{}
	if opts.Weights {
		q.Set("weights", "true")
		if opts.Limit != 0 {
			q.Set("limit", strconv.Itoa(max(opts.Limit, 0)))
		}
	}
	var out Model
	if _, err := c.do(ctx, &call{method: http.MethodGet, path: path("jobs", job, "model"), query: q}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Windows of the synopsis and join queries.
const (
	WindowCurrent = "current" // the newest window (the default)
	WindowLast    = "last"    // the newest closed window
	WindowAll     = "all"     // every window kept, merged
)

// windowQuery is the query of a window ("" is the server's default,
// current) and optional integer parameters (0: left out).
func windowQuery(window string, ints map[string]int) url.Values {
	q := url.Values{}
	if window != "" {
		q.Set("window", window)
	}
	for k, v := range ints {
		if v != 0 {
			q.Set(k, strconv.Itoa(v))
		}
	}
	return q
}

// TopK returns a heavy_hitters job's top k items of a window (k 0: the
// job's k).
func (c *Client) TopK(ctx context.Context, job string, k int, window string) (*TopK, error) {
	var out TopK
	if _, err := c.do(ctx, &call{method: http.MethodGet, path: path("jobs", job, "topk"), query: windowQuery(window, map[string]int{"k": k})}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Distinct returns a distinct job's count of a window.
func (c *Client) Distinct(ctx context.Context, job string, window string) (*Distinct, error) {
	var out Distinct
	if _, err := c.do(ctx, &call{method: http.MethodGet, path: path("jobs", job, "distinct"), query: windowQuery(window, nil)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Matches returns a join job's statistics, the estimate of a window and
// up to limit recent matches per partition (0: the server's default, 20).
func (c *Client) Matches(ctx context.Context, job string, window string, limit int) (*Matches, error) {
	var out Matches
	if _, err := c.do(ctx, &call{method: http.MethodGet, path: path("jobs", job, "matches"), query: windowQuery(window, map[string]int{"limit": limit})}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Healthz checks once that the server is alive.
func (c *Client) Healthz(ctx context.Context) error {
	_, err := c.do(ctx, &call{method: http.MethodGet, path: "/healthz", noRetry: true}, nil)
	return err
}

// Ready asks once whether the server takes events: false while it starts
// (recovering its jobs).
func (c *Client) Ready(ctx context.Context) (bool, error) {
	status, err := c.do(ctx, &call{method: http.MethodGet, path: "/readyz", noRetry: true, okStatus: http.StatusServiceUnavailable}, nil)
	return status == http.StatusOK, err
}

// WaitReady polls /readyz every 50ms until the server is ready, through
// connection errors and 5xx (a server still starting), until ctx ends; it
// then returns ctx's error with the last answer. Any other refusal (a 401
// for a wrong token) is returned at once.
func (c *Client) WaitReady(ctx context.Context) error {
	const poll = 50 * time.Millisecond
	for {
		ok, err := c.Ready(ctx)
		if ok {
			return nil
		}
		if e, refused := err.(*Error); refused && !e.transient() {
			return err
		}
		if err == nil {
			err = fmt.Errorf("server not ready yet")
		}
		if !sleep(ctx, poll) {
			return fmt.Errorf("waiting for the server to be ready: %w (last: %v)", ctx.Err(), err)
		}
	}
}

// newIdempotencyKey is a random key for one batch and its retries.
func newIdempotencyKey() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
