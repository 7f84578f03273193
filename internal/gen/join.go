package gen

import (
	"math/rand/v2"
	"strconv"
)

// JoinEvent is one event of two joinable streams: impressions (left) and
// clicks (right) of ads, with a cost on impressions.
type JoinEvent struct {
	Right bool
	Key   int
	TS    int64 // epoch ms
	Cost  float64
}

// JoinEvents returns n events split at random between the two streams,
// keys uniform over keys, one millisecond apart from start: a stream with
// a known join. Deterministic per seed.
func JoinEvents(seed uint64, n, keys int, start int64) []JoinEvent {
	r := rand.New(rand.NewPCG(seed, 0x6a6f696e))
	out := make([]JoinEvent, n)
	for i := range out {
		out[i] = JoinEvent{Right: r.IntN(2) == 1, Key: r.IntN(keys), TS: start + int64(i), Cost: float64(r.IntN(100))}
	}
	return out
}

// JoinCount is the true COUNT of the join within ms of events in
// event-time order (as JoinEvents makes them).
func JoinCount(evs []JoinEvent, within int64) int {
	byKey := map[int][]JoinEvent{}
	n := 0
	for _, e := range evs {
		prev := byKey[e.Key]
		for i := len(prev) - 1; i >= 0 && e.TS-prev[i].TS <= within; i-- {
			if prev[i].Right != e.Right {
				n++
			}
		}
		byKey[e.Key] = append(prev, e)
	}
	return n
}

// AppendJSON appends the event as one NDJSON line: {"ad":"ad-7","ts":…}
// plus "cost" on impressions.
func (e JoinEvent) AppendJSON(b []byte) []byte {
	b = append(b, `{"ad":"ad-`...)
	b = strconv.AppendInt(b, int64(e.Key), 10)
	b = append(b, `","ts":`...)
	b = strconv.AppendInt(b, e.TS, 10)
	if !e.Right {
		b = append(b, `,"cost":`...)
		b = strconv.AppendFloat(b, e.Cost, 'g', -1, 64)
	}
	return append(b, "}\n"...)
}

// JoinBodies returns the events as NDJSON requests: each block of batch
// events in order becomes one request of its left events and one of its
// right events. Within a block the event times of the two requests
// interleave, so a join needs an allowed lateness of batch ms to join them
// all.
func JoinBodies(evs []JoinEvent, batch int, left, right string) (streams []string, bodies [][]byte) {
	for start := 0; start < len(evs); start += batch {
		var l, r []byte
		for _, e := range evs[start:min(start+batch, len(evs))] {
			if e.Right {
				r = e.AppendJSON(r)
			} else {
				l = e.AppendJSON(l)
			}
		}
		for _, x := range []struct {
			s string
			b []byte
		}{{left, l}, {right, r}} {
			if len(x.b) > 0 {
				streams, bodies = append(streams, x.s), append(bodies, x.b)
			}
		}
	}
	return streams, bodies
}
