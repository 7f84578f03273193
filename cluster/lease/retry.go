package lease

import (
	"context"
	"errors"
	"time"

	"github.com/mlstream/mlstream/cluster/natsnode"
	"github.com/nats-io/nats.go/jetstream"
)

// transient reports whether err is one of the JetStream failures that pass
// by themselves (natsnode.Transient), or a bucket that another node has
// just created and this one's server does not know yet.
func transient(err error) bool {
	return natsnode.Transient(err) || errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound)
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
