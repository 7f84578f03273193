package logreg

import (
	goruntime "runtime"
	"syscall"
	"testing"
	"time"

	"github.com/mlstream/mlstream/internal/gen"
	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// benchEvents are 1,000 generated events, as ingest benchmarks send.
func benchEvents() [][]byte {
	g := gen.New(gen.Config{Seed: 9})
	out := make([][]byte, 1000)
	for i := range out {
		out[i] = g.Next().AppendJSON(nil)
	}
	return out
}

// BenchmarkExtractBytes is the fast path's extraction of an event.
func BenchmarkExtractBytes(b *testing.B) {
	j := fastJobs(b)[0]
	evs := benchEvents()
	var a runtime.Arena
	var rec runtime.Record
	defer threadCPU(b)()
	for i := 0; b.Loop(); i++ {
		if i%len(evs) == 0 {
			a.ResetFeatures()
		}
		if !j.ExtractBytes(evs[i%len(evs)], &rec, &a, 0) {
			b.Fatal("declined")
		}
	}
}

// BenchmarkParseExtract is the ordinary path: fastjson, then Extract.
func BenchmarkParseExtract(b *testing.B) {
	j := fastJobs(b)[0]
	evs := benchEvents()
	var a runtime.Arena
	var rec runtime.Record
	var p fastjson.Parser
	defer threadCPU(b)()
	for i := 0; b.Loop(); i++ {
		if i%len(evs) == 0 {
			a.ResetFeatures()
		}
		v, err := p.ParseBytes(evs[i%len(evs)])
		if err != nil {
			b.Fatal(err)
		}
		if err := j.Extract(v, &rec, &a, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParse is fastjson alone.
func BenchmarkParse(b *testing.B) {
	evs := benchEvents()
	var p fastjson.Parser
	defer threadCPU(b)()
	for i := 0; b.Loop(); i++ {
		if _, err := p.ParseBytes(evs[i%len(evs)]); err != nil {
			b.Fatal(err)
		}
	}
}

// threadCPU reports, when the returned function is called, the CPU time
// per op of the benchmark's thread: steadier than the wall clock on a
// shared machine.
func threadCPU(b *testing.B) func() {
	goruntime.LockOSThread()
	start := threadTime()
	return func() {
		b.ReportMetric(float64((threadTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
		goruntime.UnlockOSThread()
	}
}

func threadTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkNamesObserve is the name dictionary's work for one sampled
// event (one in namesEvery is): its names counted at their slots.
func BenchmarkNamesObserve(b *testing.B) {
	j := fastJobs(b)[0]
	evs := benchEvents()
	recs := make([]runtime.Record, len(evs))
	var a runtime.Arena
	for i, ev := range evs {
		if !j.ExtractBytes(ev, &recs[i], &a, 0) {
			b.Fatal("declined")
		}
	}
	defer threadCPU(b)()
	for i := 0; b.Loop(); i++ {
		k := i % len(evs)
		j.names.observeRaw(evs[k], j.fields.Features, recs[k].Features, j.model)
	}
}
