// Package client is a Go client of mlstream's HTTP and WebSocket API: post
// events (one request at a time with PostEvents, or batched and paced by a
// Sender), declare and inspect jobs, ask for predictions and query synopses
// and joins, and subscribe to the live feed of predictions, top-k changes,
// backups and recoveries.
//
// Every call takes a context and retries what the server asks to be retried
// (429 with its Retry-After, 408, 5xx and connection errors) under the
// Config's RetryPolicy, so a client of a busy or restarting server needs no
// loop of its own; a server that stays away makes the call fail after
// RetryPolicy.GiveUpAfter with a *GiveUpError. Answers the server refuses
// for good come back as *Error, with the status and the fields of the
// server's JSON error body.
//
// To depend on it, from another module:
//
//	go get github.com/mlstream/mlstream/client
//
// and import "github.com/mlstream/mlstream/client". The module is the
// whole service, github.com/mlstream/mlstream, but a program that imports
// only this package builds only it and its one dependency,
// github.com/gorilla/websocket (go.sum lists the rest of the module's
// requirements; none is compiled). Against a local checkout, add
// "replace github.com/mlstream/mlstream => ../mlstream" to your go.mod.
// The client speaks the API of the server of the same version: docs/api.md.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// Config configures a Client. The zero value of every field takes the
// default noted.
type Config struct {
	// HTTPClient sends the requests (default: a client of its own on a clone
	// of http.DefaultTransport).
	HTTPClient *http.Client
	// Token, when set, is sent as "Authorization: Bearer <Token>" with every
	// request, the WebSocket handshake included.
	Token string
	// UserAgent is the User-Agent header (default "mlstream-client").
	UserAgent string
	// RequestTimeout bounds one attempt of a request, reading the answer
	// included; an attempt that runs out is retried (default 30s; negative:
	// no bound).
	RequestTimeout time.Duration
	// Retry says when a failed attempt is tried again.
	Retry RetryPolicy
	// MaxResponseBytes caps the answer the client reads (default 64 MiB);
	// a longer one fails the call. It also caps one WebSocket message.
	MaxResponseBytes int64
	// WSDialer dials the WebSocket feed (default: websocket.DefaultDialer's
	// settings with a handshake timeout of RequestTimeout).
	WSDialer *websocket.Dialer
	// OnRetry, when set, is called before each retry of any call, from the
	// goroutine that makes the call.
	OnRetry func(Retry)
}

// Client talks to one mlstream server. Safe for concurrent use.
type Client struct {
	base   *url.URL
	cfg    Config
	policy RetryPolicy
	// answered is when (unix ns) the server last gave an answer that is
	// not retried: the clock of RetryPolicy.GiveUpAfter.
	answered atomic.Int64
}

// Defaults of Config.
const (
	DefaultRequestTimeout   = 30 * time.Second
	DefaultMaxResponseBytes = 64 << 20
	DefaultUserAgent        = "mlstream-client"
)

// New returns a client of the server at baseURL (e.g.
// "http://localhost:8080"; a path prefix is kept).
func New(baseURL string, cfg Config) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL must be an http(s) URL like http://localhost:8080, got %q", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	if cfg.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 16
		cfg.HTTPClient = &http.Client{Transport: tr}
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.WSDialer == nil {
		d := *websocket.DefaultDialer
		d.HandshakeTimeout = max(cfg.RequestTimeout, 0)
		cfg.WSDialer = &d
	}
	return &Client{base: u, cfg: cfg, policy: cfg.Retry.withDefaults()}, nil
}

// Error is an answer of the server that refuses a request, with the fields
// of its JSON error body.
type Error struct {
	Status  int    // HTTP status
	Message string // the body's "error", or the body itself when not JSON
	// Line is the NDJSON line (or array position) of the event at fault,
	// 1-based within the request body; 0 when none.
	Line int
	// Field names the field at fault, e.g. "label" or "params.hash_bits".
	Field string
	// RetryAfter is how long the server asked to wait before retrying
	// (429, 503): retry_after_ms of the body, else the Retry-After header.
	RetryAfter time.Duration
	hinted     bool // RetryAfter was given, even as zero
}

func (e *Error) Error() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d %s: ", e.Status, http.StatusText(e.Status))
	if e.Line > 0 {
		fmt.Fprintf(&sb, "line %d: ", e.Line)
	}
	sb.WriteString(e.Message)
	if e.Field != "" {
		fmt.Fprintf(&sb, " (field %q)", e.Field)
	}
	return sb.String()
}

// errorBody is the server's JSON error body.
type errorBody struct {
	Error        string `json:"error"`
	Line         int    `json:"line"`
	Field        string `json:"field"`
	RetryAfterMS *int64 `json:"retry_after_ms"`
}

// newError reads a refusal: the JSON error body when there is one, else
// the start of the body as text.
func newError(status int, h http.Header, body []byte, now time.Time) *Error {
	e := &Error{Status: status}
	var eb errorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error != "" {
		e.Message, e.Line, e.Field = eb.Error, eb.Line, eb.Field
	} else {
		e.Message = strings.TrimSpace(string(body))
		if len(e.Message) > 200 {
			e.Message = e.Message[:200] + "..."
		}
		if e.Message == "" {
			e.Message = "(empty response)"
		}
	}
	e.RetryAfter, e.hinted = retryAfter(h, eb.RetryAfterMS, now)
	return e
}

// call is one API request.
type call struct {
	method, path string
	// key is the Idempotency-Key every attempt of the call carries.
	key         string
	query       url.Values
	contentType string
	body        []byte
	noRetry     bool
	// okStatus is a status besides 2xx that is an answer, not an error
	// (readyz's 503).
	okStatus int
	// onRetry and sleepCtx override the client's hook and the context
	// retry waits stop on (the Sender's).
	onRetry  func(Retry)
	sleepCtx context.Context
}

// do makes the call with retries and decodes a successful JSON answer into
// out (when not nil). It returns the final status.
func (c *Client) do(ctx context.Context, cl *call, out any) (int, error) {
	start := time.Now()
	sleepCtx := cl.sleepCtx
	if sleepCtx == nil {
		sleepCtx = ctx
	}
	for retries := 0; ; retries++ {
		status, transient, err := c.attempt(ctx, cl, out)
		if err == nil || !transient || cl.noRetry {
			if status != 0 {
				c.answered.Store(time.Now().UnixNano())
			}
			return status, err
		}
		if ctx.Err() != nil {
			return status, fmt.Errorf("%s %s: %w (last attempt: %v)", cl.method, cl.path, ctx.Err(), err)
		}
		wait, gu := c.giveUp(start, retries, c.policy.wait(err, retries), err)
		if gu != nil {
			return status, gu
		}
		r := Retry{Method: cl.method, Path: cl.path, Attempt: retries + 1, Err: err, Wait: wait}
		if cl.onRetry != nil {
			cl.onRetry(r)
		} else if c.cfg.OnRetry != nil {
			c.cfg.OnRetry(r)
		}
		if !sleep(sleepCtx, wait) {
			return status, fmt.Errorf("%s %s: %w (last attempt: %v)", cl.method, cl.path, sleepCtx.Err(), err)
		}
	}
}

// attempt sends the request once. A non-nil error is an *Error for a
// refusal, a network error, or an answer that cannot be read; transient
// says whether trying again may help (network errors, 408, 429, 5xx).
func (c *Client) attempt(ctx context.Context, cl *call, out any) (status int, transient bool, err error) {
	if c.cfg.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.RequestTimeout)
		defer cancel()
	}
	req, err := c.newRequest(ctx, cl)
	if err != nil {
		return 0, false, err
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return 0, true, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxResponseBytes+1))
	if err != nil {
		return 0, true, fmt.Errorf("%s %s: reading the answer: %w", cl.method, cl.path, err)
	}
	if int64(len(body)) > c.cfg.MaxResponseBytes {
		return resp.StatusCode, false, fmt.Errorf("%s %s: answer over MaxResponseBytes (%d bytes)", cl.method, cl.path, c.cfg.MaxResponseBytes)
	}
	if (resp.StatusCode < 200 || resp.StatusCode > 299) && resp.StatusCode != cl.okStatus {
		e := newError(resp.StatusCode, resp.Header, body, time.Now())
		return resp.StatusCode, e.transient(), e
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			return resp.StatusCode, false, fmt.Errorf("%s %s: answer is not the JSON expected: %w", cl.method, cl.path, err)
		}
		if r, ok := out.(rawKeeper); ok {
			r.keepRaw(body)
		}
	}
	return resp.StatusCode, false, nil
}

func (c *Client) newRequest(ctx context.Context, cl *call) (*http.Request, error) {
	u := *c.base
	u.RawPath = c.base.EscapedPath() + cl.path
	p, err := url.PathUnescape(u.RawPath)
	if err != nil {
		return nil, err
	}
	u.Path = p
	if len(cl.query) > 0 {
		u.RawQuery = cl.query.Encode()
	}
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u.String(), body)
	if err != nil {
		return nil, err
	}
	if cl.contentType != "" {
		req.Header.Set("Content-Type", cl.contentType)
	}
	if cl.key != "" {
		req.Header.Set("Idempotency-Key", cl.key)
	}
	c.setHeaders(req.Header)
	return req, nil
}

// setHeaders sets what every request carries: identity and credentials.
func (c *Client) setHeaders(h http.Header) {
	h.Set("User-Agent", c.cfg.UserAgent)
	h.Set("Accept", "application/json")
	if c.cfg.Token != "" {
		h.Set("Authorization", "Bearer "+c.cfg.Token)
	}
}

// rawKeeper is an answer type that keeps the whole JSON it came from.
type rawKeeper interface{ keepRaw([]byte) }

// transient says whether the server may take the request if asked again:
// after a 408, a 429 or a 5xx.
func (e *Error) transient() bool {
	return e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// path joins escaped path segments under /v1.
func path(segments ...string) string {
	var sb strings.Builder
	sb.WriteString("/v1")
	for _, s := range segments {
		sb.WriteByte('/')
		sb.WriteString(url.PathEscape(s))
	}
	return sb.String()
}

// NDJSON encodes events as NDJSON, one JSON value a line.
func NDJSON(events ...any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for i, ev := range events {
		if err := enc.Encode(ev); err != nil {
			return nil, fmt.Errorf("client: encoding event %d: %w", i+1, err)
		}
	}
	return buf.Bytes(), nil
}
