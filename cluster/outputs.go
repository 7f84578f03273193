package cluster

import (
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// outputs shares the hubs of the nodes: a message published on this
// node (a prediction, a match, a top-k change, a backup, a failover) is
// forwarded on core NATS to the nodes whose WebSocket clients want it,
// so that a client on any node receives the outputs of the whole job.
// Each node tells the others what its clients want every wantsEvery (and
// when it changes). Core NATS, not JetStream: outputs are a live feed
// that the hub drops for slow clients anyway; nothing is stored.
type outputs struct {
	n    *Node
	subs []*nats.Subscription
	quit chan struct{}
	done chan struct{}

	mu    sync.RWMutex
	wants map[string]remoteWants // by node
}

type remoteWants struct {
	set map[[2]string]bool
	at  time.Time
}

type wantsMsg struct {
	Node  string      `json:"node"`
	Wants [][2]string `json:"wants"`
}

const (
	wantsSubject = "mls.wants"
	wantsEvery   = time.Second
	wantsExpiry  = 4 * wantsEvery
	hdrJob       = "Mls-Job"
	hdrType      = "Mls-Type"
)

func newOutputs(n *Node) *outputs {
	return &outputs{n: n, wants: map[string]remoteWants{}, quit: make(chan struct{}), done: make(chan struct{})}
}

func (o *outputs) start() error {
	in, err := o.n.nc.Subscribe(outSubject+".*", o.receive)
	if err != nil {
		return err
	}
	w, err := o.n.nc.Subscribe(wantsSubject, o.receiveWants)
	if err != nil {
		_ = in.Unsubscribe()
		return err
	}
	// Outputs are many and small: a large pending limit, so that a burst
	// is not cut as a slow consumer.
	_ = in.SetPendingLimits(1<<20, 256<<20)
	o.subs = []*nats.Subscription{in, w}
	o.n.engine.Hub().SetTap(o)
	go o.announceLoop()
	return nil
}

func (o *outputs) stop() {
	close(o.quit)
	<-o.done
	for _, s := range o.subs {
		_ = s.Unsubscribe()
	}
}

// Forward is runtime.Tap's: a message published on this node.
func (o *outputs) Forward(job, typ string, msg []byte) {
	if !o.RemoteWants(job, typ) {
		return
	}
	m := nats.NewMsg(outSubject + "." + o.n.cfg.Node)
	m.Header.Set(hdrJob, job)
	m.Header.Set(hdrType, typ)
	m.Data = msg
	if err := o.n.nc.PublishMsg(m); err == nil {
		o.n.stats.forwarded.Add(1)
	}
}

// RemoteWants is runtime.Tap's.
func (o *outputs) RemoteWants(job, typ string) bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	now := time.Now()
	for _, w := range o.wants {
		if now.Sub(w.at) < wantsExpiry && (w.set[[2]string{job, typ}] || w.set[[2]string{"*", typ}]) {
			return true
		}
	}
	return false
}

func (o *outputs) receive(m *nats.Msg) {
	if strings.TrimPrefix(m.Subject, outSubject+".") == o.n.cfg.Node {
		return
	}
	o.n.engine.Hub().Inject(m.Header.Get(hdrJob), m.Header.Get(hdrType), m.Data)
}

func (o *outputs) receiveWants(m *nats.Msg) {
	var w wantsMsg
	if json.Unmarshal(m.Data, &w) != nil || w.Node == o.n.cfg.Node {
		return
	}
	set := make(map[[2]string]bool, len(w.Wants))
	for _, k := range w.Wants {
		set[k] = true
	}
	o.mu.Lock()
	o.wants[w.Node] = remoteWants{set, time.Now()}
	o.mu.Unlock()
}

// announceLoop tells the other nodes what this node's clients want.
func (o *outputs) announceLoop() {
	defer close(o.done)
	tick := time.NewTicker(wantsEvery / 4)
	defer tick.Stop()
	var last string
	var lastAt time.Time
	for {
		select {
		case <-o.quit:
			return
		case <-tick.C:
		}
		wants := o.n.engine.Hub().LocalWants()
		sort.Slice(wants, func(i, j int) bool {
			return wants[i][0] < wants[j][0] || wants[i][0] == wants[j][0] && wants[i][1] < wants[j][1]
		})
		data, _ := json.Marshal(wantsMsg{Node: o.n.cfg.Node, Wants: wants})
		if string(data) != last || time.Since(lastAt) >= wantsEvery {
			if o.n.nc.Publish(wantsSubject, data) == nil {
				last, lastAt = string(data), time.Now()
			}
		}
	}
}
