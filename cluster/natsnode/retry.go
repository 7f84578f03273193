package natsnode

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Backoff of Retry: the first wait, and the cap the doubling stops at.
const (
	retryFirst = 50 * time.Millisecond
	retryCap   = time.Second
)

// JetStream API error codes (nats-server errors.json) that mean "not now" rather than "no".
const (
	codeClusterNotAvail         = 10008 // JetStream system temporarily unavailable: no meta leader, cluster not ready
	codeExpectedLastSeqNotReady = 10163 // expected last sequence per subject temporarily unavailable
)

// Retry calls fn until it succeeds, returns an error that is not Transient, or ctx ends, waiting
// between attempts with a jittered backoff that starts at 50 ms and doubles up to 1 s. It returns
// the last error of fn (nil on success).
//
// Every attempt gets ctx itself. A request that nobody answers (a leader lost without its
// connection closing) then waits out the whole of ctx; use RetryEach to bound each attempt.
func Retry(ctx context.Context, fn func(ctx context.Context) error) error {
	return RetryEach(ctx, 0, fn)
}

// RetryEach is Retry with each attempt bounded by its own deadline of each (none when each is
// 0): an attempt that times out is retried while ctx lasts.
func RetryEach(ctx context.Context, each time.Duration, fn func(ctx context.Context) error) error {
	return retryWhile(ctx, each, Transient, fn)
}

// retryWhile is RetryEach with the retryable errors named by retryable.
func retryWhile(ctx context.Context, each time.Duration, retryable func(error) bool, fn func(ctx context.Context) error) error {
	wait := retryFirst
	for {
		err := attempt(ctx, each, fn)
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(jitter(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, retryCap)
	}
}

func attempt(ctx context.Context, each time.Duration, fn func(ctx context.Context) error) error {
	if each <= 0 {
		return fn(ctx)
	}
	actx, cancel := context.WithTimeout(ctx, each)
	defer cancel()
	return fn(actx)
}

// jitter spreads d over [0.75d, 1.25d) so that nodes retrying after the same failover do not
// hit the new leader in lockstep.
func jitter(d time.Duration) time.Duration {
	return d*3/4 + rand.N(d/2)
}

// Transient reports whether err is one a JetStream cluster produces while it is (re)electing
// leaders or not yet formed, so that the same call may succeed later:
//   - JetStream temporarily unavailable (API error 10008: no meta leader, cluster not ready) and
//     expected-last-sequence-per-subject temporarily unavailable (10163);
//   - no responders (nats.ErrNoResponders, and jetstream.ErrNoStreamResponse, which Publish
//     returns for it: a stream whose leader is being elected has nobody listening);
//   - leadership change (of a consumer, reported by pulls);
//   - timeouts (nats.ErrTimeout, context.DeadlineExceeded of a per-request deadline);
//   - the connection reconnecting.
//
// context.Canceled and everything else is not transient. Note that ErrNoStreamResponse and no
// responders also come back for a stream that does not exist: retrying them ends with ctx.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	for _, target := range transientErrors {
		if errors.Is(err, target) {
			return true
		}
	}
	return transientCode(err)
}

var transientErrors = []error{
	nats.ErrNoResponders,
	jetstream.ErrNoStreamResponse,
	jetstream.ErrConsumerLeadershipChanged,
	nats.ErrConsumerLeadershipChanged,
	nats.ErrTimeout,
	context.DeadlineExceeded,
	nats.ErrConnectionReconnecting,
}

// transientCode looks for a transient JetStream API error code, in the error types of both the
// jetstream package and the older JetStream API in package nats.
func transientCode(err error) bool {
	var code uint16
	var apiErr *jetstream.APIError
	var legacyErr *nats.APIError
	switch {
	case errors.As(err, &apiErr):
		code = uint16(apiErr.ErrorCode)
	case errors.As(err, &legacyErr):
		code = uint16(legacyErr.ErrorCode)
	default:
		return false
	}
	return code == codeClusterNotAvail || code == codeExpectedLastSeqNotReady
}
