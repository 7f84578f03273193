package runtime

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/synopses"
)

// Skew: how unevenly a job's partitions are loaded, and by which keys.
// Each partition's load is the events routed to it per second (processed
// or queued), measured at each of the engine's samples (one a second);
// the hottest keys come from a Space-Saving summary (package synopses)
// of a sample of the job's event keys, one in keySample, counted
// keySample times.

// SkewStatus is the skew section of a job's elastic status.
type SkewStatus struct {
	// Imbalance is the busiest partition's load over the mean load (1:
	// even; 0 while nothing was routed).
	Imbalance float64 `json:"imbalance"`
	// Loads are the events routed to each partition per second, over the
	// last sample interval.
	Loads []float64 `json:"loads"`
	// Events are the events routed to each partition (processed or
	// queued) since the layout started: the imbalance over a whole run is
	// their largest over their mean.
	Events []uint64 `json:"events"`
	// Spread is what hot-key spreading does (spec.spread; absent when off).
	Spread *SpreadStatus `json:"spread,omitempty"`
	// HotKeys are the most frequent event keys, with the partition each
	// is routed to.
	HotKeys []HotKey `json:"hot_keys,omitempty"`
}

// HotKey is one of a job's most frequent event keys: its count lies in
// [Lower, Upper] (estimates from a sample of the keys).
type HotKey struct {
	Key       string `json:"key"`
	Estimate  uint64 `json:"estimate"`
	Lower     uint64 `json:"lower"`
	Upper     uint64 `json:"upper"`
	Partition int    `json:"partition"`
}

// SpreadSpec turns hot-key spreading on: the events of a key that holds
// at least Above of the job's keyed events (as the key summary estimates
// it) go round robin over every partition instead of all to the one the
// key hashes to. Only for Spreadable kinds, single-node.
type SpreadSpec struct {
	// Above is the share of the keyed events that makes a key hot, in
	// [0.001, 0.5] (default 0.05).
	Above float64 `json:"above,omitempty"`
}

func (s *SpreadSpec) validate(kind *Kind) error {
	if s == nil {
		return nil
	}
	if !kind.Spreadable {
		return &SpecError{"spread", fmt.Sprintf("kind %s cannot spread a key over partitions (its results need all of a key's events in one partition); kinds that can: %s",
			kind.Name, kindsWhere(func(k *Kind) bool { return k.Spreadable }))}
	}
	if s.Above == 0 {
		s.Above = 0.05
	}
	if !(s.Above >= 0.001 && s.Above <= 0.5) {
		return &SpecError{"spread.above", fmt.Sprintf("must be a share of the keyed events in [0.001, 0.5], got %v", s.Above)}
	}
	return nil
}

// SpreadStatus is what spreading does now: the hot keys and the events
// it sent elsewhere than their key's partition.
type SpreadStatus struct {
	Above  float64  `json:"above"`
	Keys   []string `json:"keys"`
	Events uint64   `json:"events"`
}

// Sizes of the key summary.
const (
	keySample   = 16 // one key in keySample is counted
	keyCounters = 64 // counters of the summary
	hotKeys     = 10 // keys listed in the status
)

// keySketch is a job's summary of its event keys; it lives in the
// lineage, across rescales.
type keySketch struct {
	mu sync.Mutex
	hh *synopses.HeavyHitters // nil until the first key
	n  uint64                 // keys seen, for the sampling
	// above, when not 0, spreads the keys holding that share (SpreadSpec):
	// hot is the set, renewed every hotEvery sampled keys; spread counts
	// the events routed round robin for it.
	above  float64
	hot    atomic.Pointer[map[string]bool]
	spread atomic.Uint64
}

// hotEvery is how many sampled keys pass between two renewals of the hot
// set: often enough to follow a shift within a few thousand events.
const hotEvery = 64

// isHot says whether key's events are spread (SpreadSpec).
func (k *keySketch) isHot(key string) bool {
	if h := k.hot.Load(); h != nil && (*h)[key] {
		k.spread.Add(1)
		return true
	}
	return false
}

// spreadRequest records what a cluster's request spread (keys hot in
// the request, events moved off their key's partition): the status's
// spread keys are the last spreading request's.
func (k *keySketch) spreadRequest(hot map[string]bool, moved int) {
	k.hot.Store(&hot)
	k.spread.Add(uint64(moved))
}

// renewHot recomputes the hot set from the summary (k.mu held).
func (k *keySketch) renewHot() {
	hot := map[string]bool{}
	least := k.above * float64(k.hh.Total())
	for _, it := range k.hh.TopK(keyCounters) {
		if float64(it.Lower) >= least { // a sure count: a tail key's estimate carries the summary's floor
			hot[it.Key] = true
		}
	}
	k.hot.Store(&hot)
}

func (k *keySketch) spreadStatus() *SpreadStatus {
	if k.above == 0 {
		return nil
	}
	st := &SpreadStatus{Above: k.above, Keys: []string{}, Events: k.spread.Load()}
	if h := k.hot.Load(); h != nil {
		for key := range *h {
			st.Keys = append(st.Keys, key)
		}
		slices.Sort(st.Keys)
	}
	return st
}

// observe counts a sample of the keys of one request's records.
func (k *keySketch) observe(parts [][]Record) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, recs := range parts {
		// Only every keySample-th record is looked at: the (n+1)-th of the
		// job's when n+1 is a multiple of keySample.
		first := (keySample - 1 - k.n%keySample) % keySample
		for i := first; i < uint64(len(recs)); i += keySample {
			if recs[i].Key == "" {
				continue
			}
			if k.hh == nil {
				k.hh = synopses.NewHeavyHitters(keyCounters)
			}
			k.hh.Update(recs[i].Key, keySample)
			if k.above > 0 && ((k.n+i+1)/keySample)%hotEvery == 0 {
				k.renewHot()
			}
		}
		k.n += uint64(len(recs))
	}
}

// top is the hottest keys, routed over n partitions.
func (k *keySketch) top(n int) []HotKey {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.hh == nil {
		return nil
	}
	var out []HotKey
	for _, it := range k.hh.TopK(hotKeys) {
		out = append(out, HotKey{Key: it.Key, Estimate: it.Estimate, Lower: it.Lower, Upper: it.Upper, Partition: PartitionOf(it.Key, n)})
	}
	return out
}

// loadMeter measures each partition's load at the engine's samples.
type loadMeter struct {
	mu     sync.Mutex
	at     time.Time
	routed []uint64 // per partition at the last sample: processed + queued
	loads  []float64
}

// routed is the events routed to each partition so far: processed or
// queued here, or, in a cluster that knows them (ClusterLoads), by every
// partition's owner.
func (j *Job) routed() []uint64 {
	if cl, ok := j.cluster.(ClusterLoads); ok {
		if routed, ok := cl.Routed(j); ok {
			return routed
		}
	}
	routed := make([]uint64, len(j.parts))
	for i, p := range j.parts {
		routed[i] = p.processed.Load() + uint64(max(p.q.depth.Load(), 0))
	}
	return routed
}

// ClusterLoads is a Cluster that knows how many events each partition of
// a job was routed (by its owner's counts): a job's skew then shows the
// whole cluster's, not this node's.
type ClusterLoads interface {
	// Routed is the events routed to each partition of j so far (ok
	// false when not known for every partition).
	Routed(j *Job) (routed []uint64, ok bool)
}

// sampleLoads takes one measure of the partitions' loads.
func (j *Job) sampleLoads(now time.Time) {
	routed := j.routed()
	m := &j.loads
	m.mu.Lock()
	defer m.mu.Unlock()
	if dt := now.Sub(m.at).Seconds(); !m.at.IsZero() && dt > 0 {
		m.loads = make([]float64, len(routed))
		for i, r := range routed {
			m.loads[i] = float64(r-min(r, m.routed[i])) / dt
		}
	}
	m.at, m.routed = now, routed
}

func (j *Job) skew() *SkewStatus {
	m := &j.loads
	m.mu.Lock()
	st := &SkewStatus{Loads: append([]float64{}, m.loads...)}
	m.mu.Unlock()
	var sum, most float64
	for _, l := range st.Loads {
		sum += l
		most = max(most, l)
	}
	if sum > 0 {
		st.Imbalance = most / (sum / float64(len(st.Loads)))
	}
	st.HotKeys = j.keys.top(len(j.parts))
	st.Spread = j.keys.spreadStatus()
	st.Events = j.routed()
	return st
}
