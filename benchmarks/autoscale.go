package main

import (
	"context"
	"fmt"
	goruntime "runtime"
	"slices"
	"sync"
	"time"

	"github.com/mlstream/mlstream/kinds/kindtest"
	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// The autoscaler under a step workload: a job of the test kind throttled,
// whose partitions process at most stepRate events per busy second (so the
// right count is known), fed a paced input that steps up and back down;
// the autoscaler against fixed under- and over-provisioned counts.
const (
	stepRate    = 2000 // events per busy second of a partition
	stepTick    = time.Second
	stepRequest = 50 // events a request
)

// stepPhases are the input's steps: events per second for a duration.
func stepPhases(quick bool) []struct {
	rate int
	dur  time.Duration
} {
	d := 10 * time.Second
	if quick {
		d = 6 * time.Second
	}
	return []struct {
		rate int
		dur  time.Duration
	}{{2000, d}, {6000, 2 * d}, {2000, d}}
}

// stepSample is one second of a run.
type stepSample struct {
	at         time.Duration
	input      float64 // events accepted per second
	partitions int
	p99        time.Duration // of the events accepted in the second
	queued     int64
}

func autoscaleTable(quick bool) {
	prev := goruntime.GOMAXPROCS(8) // the autoscaler never passes GOMAXPROCS; the partitions mostly sleep
	defer goruntime.GOMAXPROCS(prev)
	setups := []struct {
		name  string
		parts int
		auto  *runtime.AutoscaleSpec
	}{
		{"autoscale [1, 8], utilization 0.7, cooldown 2s", 1, &runtime.AutoscaleSpec{Min: 1, Max: 8, TargetUtilization: 0.7, Cooldown: "2s"}},
		{"fixed 2 (under-provisioned for the step)", 2, nil},
		{"fixed 8 (over-provisioned)", 8, nil},
	}
	var runs [][]stepSample
	for _, s := range setups {
		runs = append(runs, stepRun(quick, s.parts, s.auto))
	}
	t := newTable("elastic-step", "Elastic jobs: the autoscaler under a step workload",
		fmt.Sprintf("A job of the test kind throttled (each partition processes at most %d events per busy second, so %d events/s need ceil(%d/(%d×0.7)) = %d partitions at utilization 0.7 and %d events/s need %d), fed paced requests of %d events: %s. The autoscaler decides every %v (--autoscale-interval). Per second: events accepted, partitions, the 99th percentile of the time from an event's acceptance to the job having processed that many events (FIFO across partitions, so within a request of it), and the events queued.",
			stepRate, 2000, 2000, stepRate, 2, 6000, 5, stepRequest, phasesText(quick), stepTick),
		"second", "input (events/s)", "autoscale: partitions", "autoscale: p99", "autoscale: queued", "fixed 2: p99", "fixed 2: queued", "fixed 8: p99")
	for i := range runs[0] {
		row := []any{fmt.Sprintf("%.0f", runs[0][i].at.Seconds()), runs[0][i].input, runs[0][i].partitions, ms(runs[0][i].p99), runs[0][i].queued}
		for k := 1; k < len(runs); k++ {
			if i < len(runs[k]) {
				if k == 1 {
					row = append(row, ms(runs[k][i].p99), runs[k][i].queued)
				} else {
					row = append(row, ms(runs[k][i].p99))
				}
			}
		}
		t.Row(row...)
	}
	t.Print()
	sum := newTable("elastic-step-summary", "Elastic jobs: the step workload, summary",
		"Over the whole run of the table above: the median and the worst of the seconds' p99 latencies, partition-seconds used (the cost), and the partition counts it went through.",
		"setup", "median second's p99", "worst second's p99", "partition-seconds", "partitions over time")
	for k, s := range setups {
		var all []time.Duration
		worst := time.Duration(0)
		cost := 0
		var counts []int
		for _, smp := range runs[k] {
			worst = max(worst, smp.p99)
			cost += smp.partitions
			if len(counts) == 0 || counts[len(counts)-1] != smp.partitions {
				counts = append(counts, smp.partitions)
			}
			all = append(all, smp.p99)
		}
		sum.Row(s.name, ms(pctDur(all, 0.5)), ms(worst), cost, fmt.Sprint(counts))
	}
	sum.Print()
}

func phasesText(quick bool) string {
	var parts []string
	for _, p := range stepPhases(quick) {
		parts = append(parts, fmt.Sprintf("%d/s for %v", p.rate, p.dur))
	}
	return fmt.Sprint(parts)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/1e6) }

func pctDur(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// stepRun feeds one setup the step workload and samples it every second.
func stepRun(quick bool, partitions int, auto *runtime.AutoscaleSpec) []stepSample {
	e := runtime.NewEngine(runtime.Config{Partitions: 1, Logger: quiet, AutoscaleInterval: stepTick, IngestWait: 5 * time.Second})
	defer e.Close(context.Background())
	spec := runtime.Spec{Name: "step", Kind: kindtest.Throttled, Input: "s", Partitions: partitions, QueueSize: 1 << 20,
		Params: map[string]any{"rate": stepRate}, Autoscale: auto}
	if _, err := e.PutJob(spec); err != nil {
		panic(err)
	}
	var mu sync.Mutex
	var accepted []time.Time // acceptance time of each event, in order
	stop := make(chan struct{})
	processedAt := map[int]time.Time{} // accepted index reached → when
	var wg sync.WaitGroup
	wg.Go(func() { pollProcessed(e, stop, &mu, &accepted, processedAt) })
	start := time.Now()
	var samples []stepSample
	next := start.Add(stepTick)
	sent := 0
	for _, ph := range stepPhases(quick) {
		end := time.Now().Add(ph.dur)
		gap := time.Duration(float64(time.Second) * stepRequest / float64(ph.rate))
		for at := time.Now(); at.Before(end); at = at.Add(gap) {
			time.Sleep(time.Until(at)) // pacing the offered load, not synchronisation
			stepPost(e, sent)
			sent += stepRequest
			now := time.Now()
			mu.Lock()
			for range stepRequest {
				accepted = append(accepted, now)
			}
			mu.Unlock()
			if now.After(next) {
				samples = append(samples, stepSample{at: now.Sub(start), partitions: stepJob(e).Partitions()})
				next = next.Add(stepTick)
			}
		}
	}
	for stepJob(e).Status(false).Processed < uint64(sent) {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	return stepLatencies(samples, start, accepted, processedAt)
}

// stepJob is the job now (a rescale makes a new one).
func stepJob(e *runtime.Engine) *runtime.Job {
	j, err := e.Job("step")
	if err != nil {
		panic(err)
	}
	return j
}

// pollProcessed records when the job's processed count passed each
// count, every millisecond.
func pollProcessed(e *runtime.Engine, stop chan struct{}, mu *sync.Mutex, accepted *[]time.Time, at map[int]time.Time) {
	last := 0
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Millisecond):
		}
		j, err := e.Job("step")
		if err != nil {
			continue
		}
		n := int(j.Status(false).Processed)
		now := time.Now()
		mu.Lock()
		for ; last < n && last < len(*accepted); last++ {
			at[last] = now
		}
		mu.Unlock()
	}
}

// stepLatencies fills each second's input, p99 and queue from the
// events' acceptance and processing times.
func stepLatencies(samples []stepSample, start time.Time, accepted []time.Time, processed map[int]time.Time) []stepSample {
	for k := range samples {
		from := time.Duration(0)
		if k > 0 {
			from = samples[k-1].at
		}
		var lats []time.Duration
		n := 0
		queued := int64(0)
		for i, a := range accepted {
			off := a.Sub(start)
			if off >= from && off < samples[k].at {
				n++
				if p, ok := processed[i]; ok {
					lats = append(lats, p.Sub(a))
				}
			}
			if off < samples[k].at {
				if p, ok := processed[i]; !ok || p.Sub(start) > samples[k].at {
					queued++
				}
			}
		}
		samples[k].input = float64(n) / (samples[k].at - from).Seconds()
		samples[k].p99 = pctDur(lats, 0.99)
		samples[k].queued = queued
	}
	return samples
}

// stepPost ingests one request of the step workload.
func stepPost(e *runtime.Engine, first int) {
	var p fastjson.Parser
	b, err := e.NewBatch("s")
	if err != nil {
		panic(err)
	}
	for i := range stepRequest {
		v, _ := p.Parse(fmt.Sprintf(`{"key":"k%d"}`, first+i))
		if err := b.Add(v, i+1); err != nil {
			panic(err)
		}
	}
	if _, err := b.Commit(context.Background()); err != nil {
		panic(err)
	}
}
