package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/mlstream/mlstream/api"
	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/kinds/logreg"
	"github.com/mlstream/mlstream/runtime"
)

// drizzleTable measures end-to-end latency — from POST to the prediction
// on the WebSocket — against throughput, for fixed coordination group sizes
// and the adaptive one (Drizzle's experiment, on our runtime).
func drizzleTable(quick bool) {
	dur := 3 * time.Second
	rates := []int{20_000, 80_000, 160_000, 240_000}
	if quick {
		dur, rates = time.Second, []int{20_000, 80_000}
	}
	t := newTable("drizzle", "Drizzle: latency against throughput by coordination group size", fmt.Sprintf("A logreg job (2 partitions, hash_bits 18, no fault tolerance) behind the real HTTP server on loopback; one client posts NDJSON every 10 ms at the offered rate for %v, and a WebSocket client reads the prediction of every event (each event is predicted, then learned). Latency is from the POST to the prediction's arrival, per event; group sizes are in batches (one batch per request and partition), merged into the global model after each group; auto adapts the size to keep coordination within 5-10%% of the time. Sender, server and reader share the machine's 2 cores.", dur),
		"group size", "offered events/s", "delivered events/s", "p50 latency", "p99 latency", "group size reached", "merges/s", "coordination share", "WebSocket drops")
	var p99s []series
	for _, every := range []any{1, 10, 100, "auto"} {
		curve := series{Name: fmt.Sprintf("group %v", every)}
		for _, rate := range rates {
			r := latencyRun(every, rate, dur)
			t.Row(fmt.Sprint(every), rate, r.delivered, num(r.p50, "%.1f ms"), num(r.p99, "%.1f ms"), num(r.group.Size, "%.1f"),
				r.merges, num(100*r.group.TotalOverhead, "%.1f%%"), r.dropped)
			curve.X, curve.Y = append(curve.X, r.delivered), append(curve.Y, r.p99)
		}
		p99s = append(p99s, curve)
	}
	t.Print()
	figure("drizzle-latency", "p99 latency (POST to prediction) against delivered throughput", "delivered events/s", "p99 latency (ms)", p99s...)
}

type latencyResult struct {
	p50, p99  float64 // ms
	delivered float64
	merges    float64 // model versions per second
	dropped   int
	group     runtime.GroupStatus
}

// latencyRun serves a logreg job with group size every, posts at rate
// for dur while reading every prediction, and measures the latencies.
func latencyRun(every any, rate int, dur time.Duration) latencyResult {
	e := newBenchEngine("")
	defer e.Close(context.Background())
	spec := runtime.Spec{Name: "bench", Kind: "logreg", Input: "s", Params: map[string]any{"hash_bits": 18},
		Sync: runtime.SyncSpec{Every: every}}
	if _, err := e.PutJob(spec); err != nil {
		panic(err)
	}
	addr, stop := serveEngine(e)
	defer stop()
	// The feed is read raw, not through client.Subscribe: decoding every
	// message would add its cost to the latency measured.
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/v1/ws?jobs=bench&types=prediction", nil)
	if err != nil {
		panic(err)
	}
	defer ws.Close()
	lr := &latencyReader{lats: make([]float64, 0, int(float64(rate)*dur.Seconds())+1), done: make(chan struct{})}
	go lr.read(ws)

	sent, elapsed := sendTimed("http://"+addr, rate, dur)
	job, _ := e.Job("bench")
	lr.await(job, sent)
	st := job.Status(false)
	ws.Close()
	<-lr.done
	return lr.result(st, sent, elapsed)
}

// serveEngine serves the engine's API on a loopback port until stop.
func serveEngine(e *runtime.Engine) (addr string, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	hs := &http.Server{Handler: api.New(api.Config{Engine: e, Logger: quiet})}
	go hs.Serve(ln)
	return ln.Addr().String(), func() { hs.Close() }
}

// latencyReader collects the latency of every prediction read from a
// WebSocket, from the send time its key carries.
type latencyReader struct {
	mu   sync.Mutex
	lats []float64 // ms
	done chan struct{}
}

// read reads predictions until the connection closes. Each event's key
// carries its send time: "<unix ns>-<i>".
func (lr *latencyReader) read(ws *websocket.Conn) {
	defer close(lr.done)
	key := []byte(`"key":"`)
	for {
		_, msg, err := ws.ReadMessage()
		if err != nil {
			return
		}
		now := time.Now().UnixNano()
		i := bytes.Index(msg, key)
		if i < 0 {
			continue
		}
		rest := msg[i+len(key):]
		j := bytes.IndexByte(rest, '-')
		if j < 0 {
			continue
		}
		sent, err := strconv.ParseInt(string(rest[:j]), 10, 64)
		if err != nil {
			continue
		}
		lr.mu.Lock()
		lr.lats = append(lr.lats, float64(now-sent)/1e6)
		lr.mu.Unlock()
	}
}

func (lr *latencyReader) count() int {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return len(lr.lats)
}

// await waits for the job's queues to drain and then for the last
// predictions (giving up after a second of silence or 10 s in all).
func (lr *latencyReader) await(job *runtime.Job, sent int) {
	deadline := time.Now().Add(10 * time.Second)
	for job.Status(false).QueueDepth > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for last := -1; time.Now().Before(deadline); {
		n := lr.count()
		if n == last || n >= sent {
			break
		}
		last = n
		time.Sleep(200 * time.Millisecond)
	}
}

// result turns the latencies read (the reader done) and the job's status
// into the table's row.
func (lr *latencyReader) result(st runtime.JobStatus, sent int, elapsed time.Duration) latencyResult {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	lats := lr.lats
	out := latencyResult{delivered: float64(len(lats)) / elapsed.Seconds(), dropped: sent - len(lats)}
	if st.Group != nil {
		out.group = *st.Group
	}
	if ls := logreg.StatusOf(st); ls != nil && ls.Model != nil {
		out.merges = float64(ls.Model.Version) / elapsed.Seconds()
	}
	if len(lats) > 0 {
		out.p50, out.p99 = quantile(lats, 0.5), quantile(lats, 0.99)
	}
	return out
}

// sendTimed posts events at rate for dur, one request every 10 ms, each
// event's key carrying its send time; it returns the events accepted.
func sendTimed(base string, rate int, dur time.Duration) (sent int, elapsed time.Duration) {
	g := gen.New(gen.Config{Seed: 21})
	pool := make([]gen.Event, 10_000)
	for i := range pool {
		pool[i] = g.Next()
	}
	const tick = 10 * time.Millisecond
	per := max(rate*int(tick)/int(time.Second), 1)
	// No retries: a refused request is not counted as offered load sent,
	// and the 10 ms schedule goes on.
	c, err := client.New(base, client.Config{Retry: client.RetryPolicy{MaxRetries: -1}})
	if err != nil {
		panic(err)
	}
	start := time.Now()
	k := 0
	var body []byte
	for tk := 0; time.Since(start) < dur; tk++ {
		body = body[:0]
		now := strconv.FormatInt(time.Now().UnixNano(), 10)
		for i := range per {
			ev := pool[k%len(pool)]
			k++
			ev.Key = now + "-" + strconv.Itoa(i)
			body = ev.AppendJSON(body)
			body = append(body, '\n')
		}
		_, err := c.PostEvents(context.Background(), "s", body)
		var refused *client.Error
		switch {
		case err == nil:
			sent += per
		case !errors.As(err, &refused):
			panic(err)
		}
		if d := time.Until(start.Add(time.Duration(tk+1) * tick)); d > 0 {
			time.Sleep(d)
		}
	}
	return sent, time.Since(start)
}

// quantile of xs (sorted in place).
func quantile(xs []float64, q float64) float64 {
	slices.Sort(xs)
	return xs[min(int(q*float64(len(xs))), len(xs)-1)]
}
