package natsnode

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestTransient(t *testing.T) {
	notAvail := &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{notAvail, true},
		{fmt.Errorf("nats: %w", notAvail), true}, // how publish wraps an API error
		{&nats.APIError{Code: 503, ErrorCode: nats.JSErrCodeJetStreamNotAvailable}, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10163}, true},
		{nats.ErrNoResponders, true},
		{jetstream.ErrNoStreamResponse, true},
		{jetstream.ErrConsumerLeadershipChanged, true},
		{nats.ErrConsumerLeadershipChanged, true},
		{nats.ErrTimeout, true},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("put: %w", context.DeadlineExceeded), true},
		{nats.ErrConnectionReconnecting, true},
		{context.Canceled, false},
		{jetstream.ErrKeyExists, false},
		{jetstream.ErrKeyNotFound, false},
		{jetstream.ErrStreamNotFound, false},
		{jetstream.ErrJetStreamNotEnabled, false},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, false},
		{nats.ErrConnectionClosed, false},
		{errors.New("disk full"), false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestTransientOnServerErrors classifies errors a real server produced.
func TestTransientOnServerErrors(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	n := startNode(t, ctx, Config{Name: "errs", Dir: t.TempDir()})
	_, err := n.Conn().Request("nobody.listens", nil, time.Second)
	if !errors.Is(err, nats.ErrNoResponders) || !Transient(err) {
		t.Errorf("request without responders: %v, transient %v", err, Transient(err))
	}
	_, err = n.JetStream().Publish(ctx, "no.stream", nil, jetstream.WithRetryAttempts(0))
	if !Transient(err) {
		t.Errorf("publish without a stream: %v, not transient", err)
	}
	_, err = n.JetStream().Stream(ctx, "MISSING")
	if err == nil || Transient(err) {
		t.Errorf("missing stream: %v, transient %v", err, Transient(err))
	}
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	<-short.Done()
	_, err = n.JetStream().AccountInfo(short)
	if err == nil || !Transient(err) {
		t.Errorf("timed-out request: %v, transient %v", err, Transient(err))
	}
}

func TestRetryUntilSuccess(t *testing.T) {
	calls := 0
	start := time.Now()
	err := Retry(context.Background(), func(context.Context) error {
		calls++
		if calls < 4 {
			return nats.ErrNoResponders
		}
		return nil
	})
	if err != nil || calls != 4 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
	// Backoff 50, 100, 200 ms with ±25% jitter.
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("3 retries took only %v: no backoff", d)
	}
}

func TestRetryStopsOnPermanentError(t *testing.T) {
	calls := 0
	err := Retry(context.Background(), func(context.Context) error {
		calls++
		return jetstream.ErrKeyExists
	})
	if !errors.Is(err, jetstream.ErrKeyExists) || calls != 1 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
}

func TestRetryReturnsLastErrorWhenCtxEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	calls := 0
	err := Retry(ctx, func(context.Context) error {
		calls++
		return fmt.Errorf("attempt %d: %w", calls, nats.ErrNoResponders)
	})
	if err == nil || err.Error() != fmt.Sprintf("attempt %d: %v", calls, nats.ErrNoResponders) {
		t.Fatalf("err %v, want the last attempt's (%d)", err, calls)
	}
	if calls < 2 {
		t.Errorf("only %d calls in 300 ms", calls)
	}
}

func TestRetryBackoffIsCapped(t *testing.T) {
	var last time.Time
	var gaps []time.Duration
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	Retry(ctx, func(context.Context) error {
		if now := time.Now(); !last.IsZero() {
			gaps = append(gaps, now.Sub(last))
		}
		last = time.Now()
		return nats.ErrTimeout
	})
	// 50+100+200+400+800 ms ≈ 1.55 s, then 1 s steps: ~7 attempts in 4 s.
	for _, g := range gaps {
		if g > 1500*time.Millisecond {
			t.Errorf("a wait of %v exceeds the 1 s cap (with jitter)", g)
		}
	}
	if len(gaps) < 5 {
		t.Errorf("only %d retries in 4 s", len(gaps))
	}
}

func TestRetryEachBoundsAnAttempt(t *testing.T) {
	ctx := testCtx(t, 5*time.Second)
	calls := 0
	err := RetryEach(ctx, 100*time.Millisecond, func(ctx context.Context) error {
		calls++
		if calls == 1 {
			<-ctx.Done() // a request nobody answers
			return ctx.Err()
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("err %v after %d calls", err, calls)
	}
}
