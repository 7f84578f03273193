package cluster

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/cluster/lease"
	"github.com/nats-io/nats.go"
)

// outputs shares the hubs of the nodes: a message published on this
// node (a prediction, a match, a top-k change, a backup, a failover) is
// forwarded on core NATS to the nodes whose WebSocket clients want it,
// so that a client on any node receives the outputs of the whole job.
// Each node tells the others what its clients want every wantsEvery (and
// when it changes). Core NATS, not JetStream: outputs are a live feed
// that the hub drops for slow clients anyway; nothing is stored.
//
// A partition's outputs are fenced like its backups: they reach this
// node's clients and the other nodes only while this node owns the
// partition, and carry the owner's lease token; a node drops an output
// whose token is below the newest it knows for that partition (an old
// owner that was paused past its lease and still processes what it had
// fetched).
type outputs struct {
	n      *Node
	subs   []*nats.Subscription
	loop   *loop
	fence  fence
	rates  *rates
	leases atomic.Pointer[lease.Manager] // set once the node joined

	mu    sync.RWMutex
	wants map[string]remoteWants // by node

	// The last announcement sent and when (the loop's only).
	lastWants   string
	lastWantsAt time.Time
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
	// hdrPart is the partition of an output (absent on job-level ones),
	// sent with hdrToken, the owner's lease token.
	hdrPart = "Mls-Partition"
)

func newOutputs(n *Node) *outputs {
	return &outputs{n: n, wants: map[string]remoteWants{},
		fence: newFence(), rates: newRates(n)}
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
	if err := o.rates.start(); err != nil {
		o.stopSubs()
		return err
	}
	o.n.engine.Hub().SetTap(o)
	o.loop = startLoop(wantsEvery/4, o.announce)
	return nil
}

func (o *outputs) stop() {
	o.loop.stop()
	o.rates.stop()
	o.stopSubs()
}

func (o *outputs) stopSubs() {
	for _, s := range o.subs {
		_ = s.Unsubscribe()
	}
}

// Forward is runtime.Tap's: a message published on this node, by
// partition part (-1: a job-level message). A partition's message goes
// on only while this node owns the partition under the newest token it
// knows.
func (o *outputs) Forward(job, typ string, part int, msg []byte) bool {
	var token uint64
	if part >= 0 {
		var owned, current bool
		token, owned, current = o.ownerToken(job, part)
		if !owned {
			o.n.stats.unownedOutputs.Add(1)
			return false
		}
		if !current {
			o.n.stats.staleOutputs.Add(1)
			return false
		}
	}
	if !o.RemoteWants(job, typ) {
		return true
	}
	m := nats.NewMsg(outSubject + "." + o.n.cfg.Node)
	m.Header.Set(hdrJob, job)
	m.Header.Set(hdrType, typ)
	if part >= 0 {
		m.Header.Set(hdrPart, strconv.Itoa(part))
		m.Header.Set(hdrToken, strconv.FormatUint(token, 10))
	}
	m.Data = msg
	if err := o.n.nc.PublishMsg(m); err == nil {
		o.n.stats.forwarded.Add(1)
	}
	return true
}

// ownerToken is this node's token for partition part of job, whether it
// owns the partition, and whether the token is the newest it knows. A job
// this node does not run (yet) passes: its outputs are not a partition
// owner's.
func (o *outputs) ownerToken(job string, part int) (token uint64, owned, current bool) {
	st := o.n.job(job)
	if st == nil || part >= len(st.parts) {
		return 0, true, true
	}
	ps := st.parts[part]
	if !ps.owned.Load() {
		return 0, false, false
	}
	token = ps.token.Load()
	return token, true, o.fence.current(partKey{job, part}, token)
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
	job := m.Header.Get(hdrJob)
	if !o.admit(job, m.Header) {
		o.n.stats.staleOutputs.Add(1)
		return
	}
	o.n.engine.Hub().Inject(job, m.Header.Get(hdrType), m.Data)
}

// admit says whether an output from another node goes to this node's
// clients: a job-level one does; a partition's one only under a token no
// older than the newest this node knows for the partition (and then that
// token is the newest). One with a partition and no readable token is
// dropped: nodes of this version always send both.
func (o *outputs) admit(job string, h nats.Header) bool {
	ps := h.Get(hdrPart)
	if ps == "" {
		return true
	}
	part, err1 := strconv.Atoi(ps)
	token, err2 := strconv.ParseUint(h.Get(hdrToken), 10, 64)
	if err1 != nil || err2 != nil || part < 0 {
		return false
	}
	return o.fence.admit(partKey{job, part}, token)
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

// announce tells the other nodes what this node's clients want: when it
// changed, and every wantsEvery anyway.
func (o *outputs) announce() {
	o.learnLeases()
	wants := o.n.engine.Hub().LocalWants()
	sort.Slice(wants, func(i, j int) bool {
		return wants[i][0] < wants[j][0] || wants[i][0] == wants[j][0] && wants[i][1] < wants[j][1]
	})
	data, _ := json.Marshal(wantsMsg{Node: o.n.cfg.Node, Wants: wants})
	if string(data) != o.lastWants || time.Since(o.lastWantsAt) >= wantsEvery {
		if o.n.nc.Publish(wantsSubject, data) == nil {
			o.lastWants, o.lastWantsAt = string(data), time.Now()
		}
	}
}

// learnLeases raises the fence to the tokens of this node's lease view,
// and forgets the partitions of jobs it no longer runs.
func (o *outputs) learnLeases() {
	m := o.leases.Load()
	if m == nil {
		return
	}
	jobs := map[string]bool{}
	for _, st := range o.n.jobsList() {
		jobs[st.name()] = true
	}
	o.fence.learn(m.Owners(), jobs)
}

// partKey names a partition of a job for the fence, without building its
// lease key on the output path.
type partKey struct {
	job  string
	part int
}

// fence holds the highest owner token this node knows for each
// partition. Tokens are revisions of the lease bucket, so they only grow,
// across owners and incarnations of a job. The lease view (refreshed every
// wantsEvery/4) is the authority; a token above it seen on an output
// received (a new owner whose lease this node's view does not show yet)
// is only a claim, which fences older tokens until the view confirms it,
// for claimTTL at most: an output under a forged token (the largest
// there is) cannot keep every later output of the partition out.
type fence struct {
	mu     sync.RWMutex
	high   map[partKey]uint64 // from the lease view
	claims map[partKey]claim  // above high, from outputs received
	now    func() time.Time
}

// claim is a token seen on an output and not (yet) in the lease view.
type claim struct {
	token uint64
	at    time.Time
}

// claimTTL is how long a token seen on an output fences older ones
// without the lease view confirming it: several refreshes of the view.
const claimTTL = 8 * wantsEvery / 4

func newFence() fence {
	return fence{high: map[partKey]uint64{}, claims: map[partKey]claim{}, now: time.Now}
}

// mark is the newest token known for k: the lease view's, or a live
// claim above it. The caller holds mu.
func (f *fence) mark(k partKey) uint64 {
	high := f.high[k]
	if c, ok := f.claims[k]; ok && c.token > high && f.now().Sub(c.at) < claimTTL {
		return c.token
	}
	return high
}

// current reports whether token is the newest known for k.
func (f *fence) current(k partKey, token uint64) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return token >= f.mark(k)
}

// admit reports whether an output under token is current for k; a token
// above the mark becomes k's claim.
func (f *fence) admit(k partKey, token uint64) bool {
	f.mu.RLock()
	mark := f.mark(k)
	f.mu.RUnlock()
	if token < mark {
		return false
	}
	if token > mark {
		f.mu.Lock()
		if token > f.mark(k) {
			f.claims[k] = claim{token: token, at: f.now()}
		}
		f.mu.Unlock()
	}
	return true
}

// learn raises the marks to the leases' tokens and drops the marks of
// jobs not in jobs.
func (f *fence) learn(owners map[string]lease.Owner, jobs map[string]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.high {
		if !jobs[k.job] {
			delete(f.high, k)
		}
	}
	for key, o := range owners {
		job, p, err := parseLeaseKey(key)
		if err != nil || p < 0 || !jobs[job] {
			continue
		}
		k := partKey{job, p}
		if o.Token > f.high[k] {
			f.high[k] = o.Token
		}
	}
	// Claims the view confirmed or passed, and expired ones, are done.
	now := f.now()
	for k, c := range f.claims {
		if !jobs[k.job] || c.token <= f.high[k] || now.Sub(c.at) >= claimTTL {
			delete(f.claims, k)
		}
	}
}
