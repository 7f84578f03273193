package cluster

import (
	"encoding/json"
	goruntime "runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Rates: every node publishes its own rates every ratesEvery on core NATS,
// and every node keeps the latest of each, so that GET /v1/cluster on any
// node shows what each node does. A live feed like the outputs: nothing
// is stored, and a node that stops publishing drops out of the table
// after ratesExpiry.
const (
	ratesSubject = "mls.rates"
	ratesEvery   = time.Second
	ratesExpiry  = 4 * ratesEvery
)

// NodeRates are one node's rates over its last ratesEvery.
type NodeRates struct {
	// Ingested is the events a second accepted by ingest on the node
	// (published to the log) and read from jobs' NATS sources there: a
	// request's events once, however many jobs read its stream.
	Ingested float64 `json:"ingested_per_s"`
	// Processed is the events a second processed by the partitions the
	// node owns.
	Processed float64 `json:"processed_per_s"`
	// Forwarded is the outputs a second forwarded to other nodes.
	Forwarded float64 `json:"forwarded_per_s"`
	// Owned is how many partitions (global units included) the node owns.
	Owned int `json:"owned_partitions"`
	// Cores is the node's GOMAXPROCS: the autoscaler caps a job at the
	// live nodes' cores.
	Cores int `json:"cores"`
	// AgeMs is the time since this node received them.
	AgeMs int64 `json:"age_ms"`
}

type ratesMsg struct {
	Node  string    `json:"node"`
	Rates NodeRates `json:"rates"`
}

// rates publishes this node's rates and keeps the other nodes' latest.
type rates struct {
	n    *Node
	sub  *nats.Subscription
	loop *loop

	mu     sync.Mutex
	latest map[string]nodeRatesAt // by node, this one's included

	// The previous sample, for the differences (publish loop only).
	prev rateSample
}

type nodeRatesAt struct {
	r  NodeRates
	at time.Time
}

func newRates(n *Node) *rates {
	return &rates{n: n, latest: map[string]nodeRatesAt{}}
}

func (r *rates) start() error {
	sub, err := r.n.nc.Subscribe(ratesSubject, r.receive)
	if err != nil {
		return err
	}
	r.sub = sub
	r.prev = r.sample(time.Now())
	r.loop = startLoop(ratesEvery, r.publish)
	return nil
}

func (r *rates) stop() {
	r.loop.stop()
	if r.sub != nil {
		_ = r.sub.Unsubscribe()
	}
}

func (r *rates) receive(m *nats.Msg) {
	var msg ratesMsg
	if json.Unmarshal(m.Data, &msg) != nil || msg.Node == "" {
		return
	}
	r.record(msg.Node, msg.Rates, time.Now())
}

func (r *rates) record(node string, nr NodeRates, at time.Time) {
	r.mu.Lock()
	r.latest[node] = nodeRatesAt{nr, at}
	r.mu.Unlock()
}

// of returns the latest rates of each node, received within ratesExpiry
// of now, and forgets the older ones.
func (r *rates) of(now time.Time) map[string]NodeRates {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]NodeRates, len(r.latest))
	for node, e := range r.latest {
		if now.Sub(e.at) >= ratesExpiry {
			delete(r.latest, node)
			continue
		}
		e.r.AgeMs = now.Sub(e.at).Milliseconds()
		out[node] = e.r
	}
	return out
}

// publish sends this node's rates since the last time (every
// ratesEvery). Its own rates are recorded directly: a node shows them
// even while NATS does not deliver.
func (r *rates) publish() {
	now := time.Now()
	cur := r.sample(now)
	nr := cur.ratesSince(r.prev)
	r.prev = cur
	r.record(r.n.cfg.Node, nr, now)
	data, _ := json.Marshal(ratesMsg{Node: r.n.cfg.Node, Rates: nr})
	_ = r.n.nc.Publish(ratesSubject, data)
}

// rateSample is this node's counters at one time.
type rateSample struct {
	at        time.Time
	ingested  uint64
	forwarded uint64
	// done is, per owned partition (and owner token), the events it
	// processed by the partition's sequence numbers.
	done  map[ownedPart]uint64
	owned int
}

// ownedPart is one ownership of a partition: a new token is a new one
// (the sequence numbers start again from the restored state).
type ownedPart struct {
	st    *jobState
	p     int
	token uint64
}

func (r *rates) sample(now time.Time) rateSample {
	st := &r.n.stats
	// The engine's count: ingest publishes a request once per job reading
	// its stream, and a source's messages are requests too.
	s := rateSample{at: now, ingested: r.n.engine.AcceptedEvents(), forwarded: st.forwarded.Load(),
		done: map[ownedPart]uint64{}}
	for _, js := range r.n.jobsList() {
		if js.global.owned.Load() {
			s.owned++
		}
		ready := js.ready.Load() && js.job != nil
		for _, ps := range js.parts {
			if !ps.owned.Load() {
				continue
			}
			s.owned++
			if !ready {
				continue
			}
			// Events handed to the partition less those still queued.
			seq := js.job.NextSeq(ps.p) - 1
			depth := uint64(max(js.job.Depth(ps.p), 0))
			s.done[ownedPart{js, ps.p, ps.token.Load()}] = seq - min(seq, depth)
		}
	}
	return s
}

// ratesSince are the rates from prev to s. A partition counts only when
// owned under the same token at both samples.
func (s rateSample) ratesSince(prev rateSample) NodeRates {
	dt := s.at.Sub(prev.at).Seconds()
	nr := NodeRates{Owned: s.owned, Cores: goruntime.GOMAXPROCS(0)}
	if dt <= 0 {
		return nr
	}
	nr.Ingested = float64(s.ingested-min(prev.ingested, s.ingested)) / dt
	nr.Forwarded = float64(s.forwarded-min(prev.forwarded, s.forwarded)) / dt
	var done uint64
	for k, v := range s.done {
		if before, ok := prev.done[k]; ok && v >= before {
			done += v - before
		}
	}
	nr.Processed = float64(done) / dt
	return nr
}
