package api

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// benchBody is 1,000 generated events as NDJSON.
var benchBody = []byte(genBody(9, 1000))

// BenchmarkParseNDJSON is the floor: fastjson parsing the same bytes that
// BenchmarkIngestHTTP posts, one core, nothing else.
func BenchmarkParseNDJSON(b *testing.B) {
	var p fastjson.Parser
	b.SetBytes(int64(len(benchBody)))
	defer reportCPU(b, 1000)()
	for b.Loop() {
		for rest := benchBody; len(rest) > 0; {
			i := bytes.IndexByte(rest, '\n')
			if _, err := p.ParseBytes(rest[:i]); err != nil {
				b.Fatal(err)
			}
			rest = rest[i+1:]
		}
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkIngestHTTP posts 1,000-event NDJSON requests to a real server
// on loopback feeding a logreg job with two partitions, and waits until
// every event is learned.
func BenchmarkIngestHTTP(b *testing.B) { benchIngest(b, specFor("bench")) }

// BenchmarkIngestHTTPDistinct is BenchmarkIngestHTTP into a distinct job
// counting the events' keys.
func BenchmarkIngestHTTPDistinct(b *testing.B) {
	benchIngest(b, runtime.Spec{Name: "bench", Kind: "distinct", Input: "mail", Partitions: 2, Params: map[string]any{"field": "key"}})
}

func benchIngest(b *testing.B, spec runtime.Spec) { benchIngestN(b, spec, 1000) }

// benchIngestN posts benchBody, of perBody events, b.N times.
func benchIngestN(b *testing.B, spec runtime.Spec, perBody int) {
	ts := newTestServer(b)
	if _, err := ts.engine.PutJob(spec); err != nil {
		b.Fatal(err)
	}
	job, _ := ts.engine.Job(spec.Name)
	url := ts.http.URL + "/v1/streams/mail/events"
	b.SetBytes(int64(len(benchBody)))
	b.ResetTimer()
	defer reportCPU(b, perBody)()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			for {
				resp, err := http.Post(url, "application/x-ndjson", bytes.NewReader(benchBody))
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusAccepted {
					break
				}
			}
		}
	})
	for job.Status(false).Processed < uint64(b.N*perBody) {
		time.Sleep(100 * time.Microsecond)
	}
	b.ReportMetric(float64(b.N*perBody)/b.Elapsed().Seconds(), "events/s")
}

// reportCPU reports, when the returned function is called, the process's
// CPU time (user and system, all threads) per event of b.N requests of
// perBody events: on a shared machine, steadier than the wall clock.
func reportCPU(b *testing.B, perBody int) func() {
	start := cpuTime()
	return func() {
		b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/1e3/float64(b.N*perBody), "cpu-µs/event")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkIngestHTTPItems is a distinct job fed {"item": ...} lines: the
// string fast path (Redis's ground, see the redis-http benchmark).
func BenchmarkIngestHTTPItems(b *testing.B) {
	var body bytes.Buffer
	for i := range 10_000 {
		fmt.Fprintf(&body, "{\"item\":\"item-%d\"}\n", (i*7919)%100_000)
	}
	saved := benchBody
	benchBody = body.Bytes()
	defer func() { benchBody = saved }()
	benchIngestN(b, runtime.Spec{Name: "bench", Kind: "distinct", Input: "mail", Partitions: 2, Params: map[string]any{"field": "item"}}, 10_000)
}
