package client

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ms := int64(250)
	h := http.Header{}
	h.Set("Retry-After", "3")
	if d, ok := retryAfter(h, &ms, now); !ok || d != 250*time.Millisecond {
		t.Errorf("body over header: %v %v", d, ok)
	}
	if d, ok := retryAfter(h, nil, now); !ok || d != 3*time.Second {
		t.Errorf("header seconds: %v %v", d, ok)
	}
	h.Set("Retry-After", now.Add(2*time.Second).Format(http.TimeFormat))
	if d, ok := retryAfter(h, nil, now); !ok || d != 2*time.Second {
		t.Errorf("header date: %v %v", d, ok)
	}
	if _, ok := retryAfter(http.Header{}, nil, now); ok {
		t.Error("no hint reported as hinted")
	}
}

func TestBackoffDoublesUpToMax(t *testing.T) {
	p := RetryPolicy{Backoff: 100 * time.Millisecond, MaxBackoff: time.Second}.withDefaults()
	err := &Error{Status: http.StatusServiceUnavailable}
	for retries, want := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		want *= time.Millisecond
		if d := p.wait(err, retries); d < want/2 || d > want {
			t.Errorf("retry %d: waited %v, want within [%v, %v]", retries+1, d, want/2, want)
		}
	}
	if d := p.wait(&Error{Status: http.StatusTooManyRequests, RetryAfter: 7 * time.Millisecond, hinted: true}, 5); d != 7*time.Millisecond {
		t.Errorf("429 waits %v, want the server's 7ms", d)
	}
}
