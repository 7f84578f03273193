package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryPolicy says when a failed attempt is tried again. Retried are
// connection errors, attempts that ran out of Config.RequestTimeout, and
// the answers 408, 429 and 5xx; every other answer is final.
//
// Event ingest is accepted or refused whole, so a retried request resends
// every event of it; an attempt that failed after the server queued it (a
// lost answer) is delivered twice: ingest has no idempotency key.
type RetryPolicy struct {
	// MaxRetries bounds the retries of one request (default 100; negative:
	// none).
	MaxRetries int
	// GiveUpAfter bounds how long a request is retried while the server
	// answers nothing but failures: once GiveUpAfter has passed since the
	// later of the request's start and the last answer this Client got
	// that was not retried, the request is tried a last time (a wait that
	// would end later is cut short) and then fails with a *GiveUpError. A
	// dead or unreachable server thus fails a call after GiveUpAfter plus
	// at most one RequestTimeout, while a busy one that still takes other
	// requests of this Client is retried up to MaxRetries (default 30s;
	// negative: no bound).
	GiveUpAfter time.Duration
	// Backoff is the first wait after a connection error, 408 or 5xx, and
	// after a 429 that names no delay; it doubles with each retry up to
	// MaxBackoff, each wait drawn in [d/2, d] (defaults 100ms and 5s). A 429
	// or 503 waits what the server asks: retry_after_ms of the body, else
	// Retry-After.
	Backoff, MaxBackoff time.Duration
}

// Defaults of RetryPolicy.
const (
	DefaultMaxRetries  = 100
	DefaultGiveUpAfter = 30 * time.Second
	DefaultBackoff     = 100 * time.Millisecond
	DefaultMaxBackoff  = 5 * time.Second
)

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxRetries == 0 {
		p.MaxRetries = DefaultMaxRetries
	}
	if p.GiveUpAfter == 0 {
		p.GiveUpAfter = DefaultGiveUpAfter
	}
	if p.Backoff <= 0 {
		p.Backoff = DefaultBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = DefaultMaxBackoff
	}
	return p
}

// wait is the delay before retry number retries+1 after err.
func (p RetryPolicy) wait(err error, retries int) time.Duration {
	var e *Error
	if errors.As(err, &e) && e.hinted {
		return e.RetryAfter
	}
	d := min(p.Backoff<<min(retries, 20), p.MaxBackoff)
	return d/2 + rand.N(d/2+1)
}

// Retry describes a retry about to happen, for Config.OnRetry.
type Retry struct {
	Method, Path string
	Attempt      int           // 1 for the first retry
	Err          error         // *Error for an answer, else the network error
	Wait         time.Duration // before the attempt
}

// GiveUpError is returned when a request is not retried any more. It wraps
// the last attempt's error (an *Error, or a network error).
type GiveUpError struct {
	Retries int
	// Quiet is how long the server had given no answer but failures.
	Quiet time.Duration
	// MaxRetries is true when RetryPolicy.MaxRetries stopped the retries,
	// false when RetryPolicy.GiveUpAfter did.
	MaxRetries bool
	Err        error
}

func (e *GiveUpError) Error() string {
	if e.MaxRetries {
		return fmt.Sprintf("giving up after %d retries: %v", e.Retries, e.Err)
	}
	return fmt.Sprintf("giving up after %d retries: no answer but failures for %v: %v", e.Retries, e.Quiet.Round(time.Millisecond), e.Err)
}

func (e *GiveUpError) Unwrap() error { return e.Err }

// giveUp returns the error that ends the retries of a request started at
// start, or nil and the wait before the next attempt: wait, cut to end at
// the give-up time.
func (c *Client) giveUp(start time.Time, retries int, wait time.Duration, err error) (time.Duration, error) {
	if retries >= max(c.policy.MaxRetries, 0) {
		return 0, &GiveUpError{Retries: retries, MaxRetries: true, Err: err, Quiet: time.Since(start)}
	}
	if c.policy.GiveUpAfter < 0 {
		return wait, nil
	}
	since := start
	if last := time.Unix(0, c.answered.Load()); last.After(since) {
		since = last
	}
	left := c.policy.GiveUpAfter - time.Since(since)
	if left <= 0 {
		return 0, &GiveUpError{Retries: retries, Err: err, Quiet: time.Since(since)}
	}
	return min(wait, left), nil
}

// retryAfter reads the delay a 429 or 503 asks for: retry_after_ms of the
// body when present, else the Retry-After header (seconds or an HTTP date).
// hinted is false when neither is there.
func retryAfter(h http.Header, bodyMS *int64, now time.Time) (d time.Duration, hinted bool) {
	if bodyMS != nil && *bodyMS >= 0 {
		return time.Duration(*bodyMS) * time.Millisecond, true
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// sleep waits d; false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
