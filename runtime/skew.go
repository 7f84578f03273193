package runtime

import (
	"sync"
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
}

// observe counts a sample of the keys of one request's records.
func (k *keySketch) observe(parts [][]Record) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, recs := range parts {
		for i := range recs {
			k.n++
			if k.n%keySample != 0 || recs[i].Key == "" {
				continue
			}
			if k.hh == nil {
				k.hh = synopses.NewHeavyHitters(keyCounters)
			}
			k.hh.Update(recs[i].Key, keySample)
		}
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

// sampleLoads takes one measure of the partitions' loads.
func (j *Job) sampleLoads(now time.Time) {
	routed := make([]uint64, len(j.parts))
	for i, p := range j.parts {
		routed[i] = p.processed.Load() + uint64(max(p.q.depth.Load(), 0))
	}
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
	return st
}
