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

func latencyRun(every any, rate int, dur time.Duration) latencyResult {
	e := newBenchEngine("")
	defer e.Close(context.Background())
	spec := runtime.Spec{Name: "bench", Kind: "logreg", Input: "s", Params: map[string]any{"hash_bits": 18},
		Sync: runtime.SyncSpec{Every: every}}
	if _, err := e.PutJob(spec); err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	hs := &http.Server{Handler: api.New(api.Config{Engine: e, Logger: quiet})}
	go hs.Serve(ln)
	defer hs.Close()
	base := "http://" + ln.Addr().String()
	// The feed is read raw, not through client.Subscribe: decoding every
	// message would add its cost to the latency measured.
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+ln.Addr().String()+"/v1/ws?jobs=bench&types=prediction", nil)
	if err != nil {
		panic(err)
	}
	defer ws.Close()

	// Each event's key carries its send time: "<unix ns>-<i>".
	lats := make([]float64, 0, int(float64(rate)*dur.Seconds())+1)
	var mu sync.Mutex
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
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
			mu.Lock()
			lats = append(lats, float64(now-sent)/1e6)
			mu.Unlock()
		}
	}()

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
	sent, k := 0, 0
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
	elapsed := time.Since(start)
	// Wait for the last predictions (or give up after a second of silence).
	job, _ := e.Job("bench")
	deadline := time.Now().Add(10 * time.Second)
	for job.Status(false).QueueDepth > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for last := -1; time.Now().Before(deadline); {
		mu.Lock()
		n := len(lats)
		mu.Unlock()
		if n == last || n >= sent {
			break
		}
		last = n
		time.Sleep(200 * time.Millisecond)
	}
	st := job.Status(false)
	ws.Close()
	<-readerDone
	mu.Lock()
	defer mu.Unlock()
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

// quantile of xs (sorted in place).
func quantile(xs []float64, q float64) float64 {
	slices.Sort(xs)
	return xs[min(int(q*float64(len(xs))), len(xs)-1)]
}
