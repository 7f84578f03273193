package lease

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// entry is this node's copy of one live key of a bucket.
type entry struct {
	rev     uint64
	value   []byte
	created time.Time // server time of the write
	seen    time.Time // local time this revision first arrived
}

// view is this node's copy of a bucket with a bucket TTL. A key whose TTL
// runs out leaves no delete marker, so view drops a revision by itself once
// it was seen more than ttl ago: the server stored it before it arrived, so
// it has expired there too unless a newer revision (which arrives here) was
// written.
type view struct {
	ttl time.Duration
	m   map[string]entry
}

func newView(ttl time.Duration) *view {
	return &view{ttl: ttl, m: make(map[string]entry)}
}

// apply records one watched update; it reports whether the set of keys
// changed.
func (v *view) apply(e jetstream.KeyValueEntry, now time.Time) bool {
	old, had := v.m[e.Key()]
	if e.Operation() != jetstream.KeyValuePut {
		delete(v.m, e.Key())
		return had
	}
	if had && old.rev >= e.Revision() {
		return false
	}
	v.m[e.Key()] = entry{rev: e.Revision(), value: e.Value(), created: e.Created(), seen: now}
	return !had
}

// replace merges a full listing taken from start on: keys the listing lacks
// are gone unless this view learnt of them after the listing began.
func (v *view) replace(list []jetstream.KeyValueEntry, start, now time.Time) bool {
	changed := false
	present := make(map[string]bool, len(list))
	for _, e := range list {
		present[e.Key()] = true
		changed = v.apply(e, now) || changed
	}
	for k, e := range v.m {
		if !present[k] && e.seen.Before(start) {
			delete(v.m, k)
			changed = true
		}
	}
	return changed
}

// expire drops the revisions that must have expired on the server.
func (v *view) expire(now time.Time) bool {
	changed := false
	for k, e := range v.m {
		if now.Sub(e.seen) > v.ttl {
			delete(v.m, k)
			changed = true
		}
	}
	return changed
}

// list reads every live key of kv once.
func list(ctx context.Context, kv jetstream.KeyValue) ([]jetstream.KeyValueEntry, error) {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	var out []jetstream.KeyValueEntry
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, context.Canceled
			}
			if e == nil {
				return out, nil
			}
			out = append(out, e)
		}
	}
}
