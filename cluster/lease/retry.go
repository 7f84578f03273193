package lease

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jsNotAvailable is "JetStream system temporarily unavailable": no meta
// leader yet.
const jsNotAvailable jetstream.ErrorCode = 10008

// transient reports whether err is one of the JetStream failures that pass
// by themselves: no meta leader yet, a Raft election after a node died, a
// connection that is reconnecting.
func transient(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jsNotAvailable {
		return true
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, jetstream.ErrConsumerLeadershipChanged),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled):
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "leadership change") || strings.Contains(msg, "temporarily unavailable")
}

const (
	minBackoff = 20 * time.Millisecond
	maxBackoff = time.Second
)

// retry runs f until it succeeds, fails for good, or ctx ends. Each attempt
// gets at most perCall, so that one lost request does not eat the whole ctx.
func retry[T any](ctx context.Context, perCall time.Duration, f func(context.Context) (T, error)) (T, error) {
	backoff := minBackoff
	for {
		callCtx, cancel := context.WithTimeout(ctx, perCall)
		v, err := f(callCtx)
		cancel()
		if err == nil || !transient(err) || ctx.Err() != nil {
			if err == nil || ctx.Err() == nil {
				return v, err
			}
			return v, errors.Join(err, ctx.Err())
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, errors.Join(err, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}
