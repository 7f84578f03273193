package runtime

import (
	"sync"
	"sync/atomic"
)

// Hub fans outputs of partitions out to subscribers. Publishing never
// blocks: each subscriber has a bounded backlog, and a message that does
// not fit is dropped and counted for that subscriber, so a slow client
// never slows a partition. Safe for concurrent use.
type Hub struct {
	mu   sync.RWMutex
	subs map[*Sub]struct{} // guarded by mu
	// wants holds, per (job, type), how many subscribers want it; it is
	// replaced whole on (un)subscribe so Wants reads it without a lock.
	wants atomic.Pointer[map[wantKey]int]

	dropped atomic.Uint64 // all subscribers, for metrics
	tap     atomic.Pointer[Tap]
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	h := &Hub{subs: map[*Sub]struct{}{}}
	h.wants.Store(&map[wantKey]int{})
	return h
}

type wantKey struct{ job, typ string }

// Sub is one subscriber. Read messages from C; the hub never closes C.
type Sub struct {
	jobs, types map[string]bool // nil jobs: every job
	C           chan []byte
	dropped     atomic.Uint64
}

// Dropped is how many messages did not fit the backlog.
func (s *Sub) Dropped() uint64 { return s.dropped.Load() }

// Wants reports whether s takes messages of this job and type.
func (s *Sub) Wants(job, typ string) bool {
	return s.types[typ] && (s.jobs == nil || s.jobs[job])
}

// Subscribe registers a subscriber for the given jobs (nil or empty: all)
// and types, with a backlog of that many messages.
func (h *Hub) Subscribe(jobs, types []string, backlog int) *Sub {
	s := &Sub{types: set(types), C: make(chan []byte, backlog)}
	if len(jobs) > 0 {
		s.jobs = set(jobs)
	}
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.rebuildWants()
	h.mu.Unlock()
	return s
}

// Unsubscribe removes s; it gets no more messages.
func (h *Hub) Unsubscribe(s *Sub) {
	h.mu.Lock()
	delete(h.subs, s)
	h.rebuildWants()
	h.mu.Unlock()
}

// rebuildWants recomputes the wants table; h.mu must be held. A
// subscriber for all jobs is recorded under job "*".
func (h *Hub) rebuildWants() {
	w := map[wantKey]int{}
	for s := range h.subs {
		for t := range s.types {
			if s.jobs == nil {
				w[wantKey{"*", t}]++
				continue
			}
			for j := range s.jobs {
				w[wantKey{j, t}]++
			}
		}
	}
	h.wants.Store(&w)
}

// Wants reports whether anyone subscribes to this job's messages of this
// type; partitions check it before building messages nobody reads.
func (h *Hub) Wants(job, typ string) bool {
	if t := h.tap.Load(); t != nil && (*t).RemoteWants(job, typ) {
		return true
	}
	w := *h.wants.Load()
	if len(w) == 0 {
		return false
	}
	return w[wantKey{"*", typ}] > 0 || w[wantKey{job, typ}] > 0
}

// Publish offers msg, a job-level message (no partition's), to every
// subscriber that wants it, without blocking. msg must not be modified
// afterwards.
func (h *Hub) Publish(job, typ string, msg []byte) { h.PublishFrom(job, typ, -1, msg) }

// PublishFrom is Publish of a message of partition part (-1: job-level).
// A tap sees the partition and may keep the message from this hub's
// subscribers (a cluster node that no longer owns the partition).
func (h *Hub) PublishFrom(job, typ string, part int, msg []byte) {
	if t := h.tap.Load(); t != nil && !(*t).Forward(job, typ, part, msg) {
		return
	}
	h.offer(job, typ, msg)
}

func (h *Hub) offer(job, typ string, msg []byte) {
	h.mu.RLock()
	for s := range h.subs {
		if !s.Wants(job, typ) {
			continue
		}
		select {
		case s.C <- msg:
		default:
			s.dropped.Add(1)
			h.dropped.Add(1)
		}
	}
	h.mu.RUnlock()
}

// Subscribers is the number of current subscribers.
func (h *Hub) Subscribers() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.subs)
}

// Dropped is the number of messages dropped over all subscribers.
func (h *Hub) Dropped() uint64 { return h.dropped.Load() }

func set(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// Tap is how a cluster node shares a hub with the other nodes: Forward
// gets every message published here (not those Injected) with the
// partition that produced it (-1: a job-level message), and says whether
// this hub's subscribers get it too; RemoteWants says whether a
// subscriber elsewhere wants a job's messages of a type, so that
// partitions build them.
type Tap interface {
	Forward(job, typ string, part int, msg []byte) (deliver bool)
	RemoteWants(job, typ string) bool
}

// SetTap installs the cluster's tap (before any job runs).
func (h *Hub) SetTap(t Tap) { h.tap.Store(&t) }

// Inject offers a message from another node to this hub's subscribers
// only.
func (h *Hub) Inject(job, typ string, msg []byte) { h.offer(job, typ, msg) }

// LocalWants lists the (job, type) pairs this hub's subscribers want, a
// job "*" standing for every job.
func (h *Hub) LocalWants() [][2]string {
	w := *h.wants.Load()
	out := make([][2]string, 0, len(w))
	for k, n := range w {
		if n > 0 {
			out = append(out, [2]string{k.job, k.typ})
		}
	}
	return out
}
