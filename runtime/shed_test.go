package runtime

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/internal/gen"
	"github.com/valyala/fastjson"
)

// commitRecords queues records extracted beforehand for the only job and
// partition of a stream: the real Commit (shedding, reservation, queue)
// without the cost of extraction, so that a sender can outrun a learner.
func commitRecords(t *testing.T, e *Engine, stream string, recs []Record) {
	t.Helper()
	b, err := e.NewBatch(stream)
	if err != nil {
		t.Fatal(err)
	}
	b.jobs[0].parts[0] = append([]Record(nil), recs...)
	b.events = len(recs)
	if _, err := b.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// commitValues queues pre-parsed events on a stream and returns the batch.
func commitValues(t *testing.T, e *Engine, stream string, vs []*fastjson.Value) *Batch {
	t.Helper()
	b, err := e.NewBatch(stream)
	if err != nil {
		t.Fatal(err)
	}
	b.Expect(len(vs))
	for i, v := range vs {
		if err := b.Add(v, i+1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

// At twice the rate a partition drains, with shedding on, events wait no
// longer than max_delay (p99), training events are dropped and counted,
// and every prediction is still answered.
func TestSheddingKeepsDelayUnderMaxDelay(t *testing.T) {
	// 200 ms: long enough that a scheduling hiccup of a loaded machine (tests
	// of other packages run beside this one) is small against it.
	const maxDelay = 200 * time.Millisecond
	e := testEngine(t, Config{QueueSize: 1 << 20})
	j := mustPut(t, e, Spec{Name: "m", Kind: "logreg", Input: "s", Partitions: 1,
		Params: map[string]any{"hash_bits": 18}, Shed: &ShedSpec{MaxDelay: maxDelay.String()}})
	sub := e.Hub().Subscribe([]string{"m"}, []string{TypePrediction}, 1<<20)
	defer e.Hub().Unsubscribe(sub)
	// Extracted once: the sender's cost is queueing only, so it can outrun
	// the learner.
	g := gen.New(gen.Config{Seed: 9})
	vs := make([]*fastjson.Value, 20_000)
	recs := make([]Record, len(vs))
	for i := range vs {
		ev := g.Next()
		line := ev.AppendJSON(nil)
		if i%10 == 0 { // a prediction request: no label
			line = []byte(strings.Replace(string(line), fmt.Sprintf(`"label":%d,`, b2i(ev.Label)), "", 1))
		}
		v, err := fastjson.ParseBytes(line)
		if err != nil {
			t.Fatal(err)
		}
		vs[i] = v
		var a arena
		if err := j.kind.extract(v, &recs[i], &a, 0); err != nil {
			t.Fatal(err)
		}
	}
	// A client reads the predictions as they come.
	predictions := make(chan int, 1)
	stop := make(chan struct{})
	go func() {
		n := 0
		for {
			select {
			case msg := <-sub.C:
				if !strings.Contains(string(msg), `"label"`) {
					n++
				}
			case <-stop:
				predictions <- n
				return
			}
		}
	}()
	// Warm up: learn the drain rate.
	for range 5 {
		commitRecords(t, e, "s", recs[:5000])
		waitIdle(t, j)
	}
	// Overload: every 2 ms, twice what the partition drains in 2 ms at its
	// current rate, so the load follows the machine's speed.
	before := j.lat.snap()
	shedBefore, processedBefore, lateBefore, overdueBefore := j.shed.shed.Load(), j.processed(), j.shed.late.Load(), j.shed.overdue.Load()
	var sent, unlabelled int
	var rates []float64
	start := time.Now()
	off := 0
	// The longest the partition made no progress while it had work, or the
	// process did not run at all (the sender's 2 ms ticks came late): a
	// stall the machine imposes (its CPU taken by other processes), which
	// no admission control can keep events from waiting through.
	var stall time.Duration
	lastProcessed, lastProgress, lastTick := j.processed(), start, start
	for k := 0; time.Since(start) < 2*time.Second; k++ {
		now, pr := time.Now(), j.processed()
		if pr != lastProcessed || j.depth() == 0 {
			lastProcessed, lastProgress = pr, now
		} else {
			stall = max(stall, now.Sub(lastProgress))
		}
		stall = max(stall, now.Sub(lastTick)-2*time.Millisecond)
		lastTick = now
		rate := math.Float64frombits(j.parts[0].rate.Load())
		rates = append(rates, rate)
		per := min(max(int(2*rate*0.002), 1), len(recs)/2)
		if off+per > len(recs) {
			off = 0
		}
		for _, r := range recs[off : off+per] {
			if r.Label < 0 {
				unlabelled++
			}
		}
		commitRecords(t, e, "s", recs[off:off+per])
		off += per
		sent += per
		if d := time.Until(start.Add(time.Duration(k+1) * 2 * time.Millisecond)); d > 0 {
			time.Sleep(d) // pacing the sender, not synchronising
		}
	}
	elapsed := time.Since(start).Seconds()
	waitIdle(t, j)
	lat := j.lat.snap().sub(before)
	p99 := lat.quantile(0.99) // ms: interpolated in its bucket, within 1.5x of the true value
	shed, late := j.shed.shed.Load()-shedBefore, j.shed.late.Load()-lateBefore
	processed := j.processed() - processedBefore
	processedRate := float64(processed) / elapsed
	// p99 ≤ max_delay is exactly "at most 1% of the events served waited
	// longer": counted per event, where the histogram's p99 is only known
	// within its bucket (a factor 1.5).
	overdue := float64(j.shed.overdue.Load()-overdueBefore) / float64(processed-late)
	slices.Sort(rates)
	t.Logf("drain rate (median) %.0f/s, offered %.0f/s, processed %.0f/s; shed %d of %d (%.0f%%; %d late), p99 queueing delay %.1f ms (bucket estimate), %.2f%% of served events over max_delay, longest stall %v",
		rates[len(rates)/2], float64(sent)/elapsed, processedRate, shed, sent, 100*float64(shed)/float64(sent), late, p99, 100*overdue, stall.Round(time.Millisecond))
	if float64(sent)/elapsed < 1.5*processedRate {
		t.Skipf("the sender reached only %.1fx what the partition processed", float64(sent)/elapsed/processedRate)
	}
	if shed == 0 {
		t.Fatal("nothing was shed at twice the drain rate")
	}
	switch {
	case stall > maxDelay/4:
		t.Logf("the machine stalled the partition for %v: the delay bound is not judged on this run", stall.Round(time.Millisecond))
	case overdue > 0.01:
		t.Fatalf("%.2f%% of the events served waited longer than max_delay %v: p99 above it", 100*overdue, maxDelay)
	}
	// Every prediction was answered.
	deadline := time.Now().Add(5 * time.Second)
	for len(sub.C) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	if got := <-predictions; got < unlabelled {
		t.Fatalf("%d predictions answered of %d asked", got, unlabelled)
	}
	if st := j.Status(false); st.Shed == nil || st.Shed.Shed < shed || st.Shed.Fraction <= 0 || st.Shed.Overdue != j.shed.overdue.Load() {
		t.Fatalf("shed status %+v", st.Shed)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Heavy hitters that shed count kept events 1/p times: over seeded streams
// the counts of the top items are unbiased (mean relative error near
// zero), and every reported bound holds the true count. The test sets the
// partition's drain rate so that the shed request keeps p = 0.3 exactly
// (1/p = 3.33: randomized rounding at work): with p left to the machine it
// would mostly be the 1% floor, whose weights of 100 make the mean too
// noisy to judge.
func TestShedHeavyHittersStayUnbiased(t *testing.T) {
	const (
		runs    = 100
		held    = 2000 // queued first, unshed
		shedReq = 8000 // then one request that sheds
		keep    = 0.3  // its share kept
		// ms: long, so that no batch waits out max_delay/2 while the job is
		// paused (shedding late would drop events of weight above 1).
		maxDelay = 10_000.0
	)
	var rels []float64
	for seed := uint64(1); seed <= runs; seed++ {
		e := testEngine(t, Config{QueueSize: 1 << 20})
		j := mustPut(t, e, Spec{Name: "h", Kind: "heavy_hitters", Input: "s", Partitions: 1,
			Params: map[string]any{"field": "item", "k": 5, "counters": 1000}, Shed: &ShedSpec{MaxDelay: "10s"}})
		r := rand.New(rand.NewPCG(seed, 5))
		z := rand.NewZipf(r, 1.2, 1, 199)
		truth := map[string]uint64{}
		vs := make([]*fastjson.Value, held+shedReq)
		for i := range vs {
			item := fmt.Sprintf("i%d", z.Uint64())
			truth[item]++
			vs[i], _ = fastjson.Parse(fmt.Sprintf(`{"item":%q}`, item))
		}
		// Held, with no drain rate known yet: the first request is queued
		// whole. Then a rate at which the queue may hold held + keep·shedReq
		// events in 0.3·max_delay.
		j.Pause()
		commitValues(t, e, "s", vs[:held])
		rate := (held + keep*shedReq) / (shedHeadroom * maxDelay / 1000)
		j.parts[0].rate.Store(math.Float64bits(rate))
		commitValues(t, e, "s", vs[held:])
		j.Resume()
		waitIdle(t, j)
		var top TopK
		deadline := time.Now().Add(5 * time.Second)
		for {
			// All the counters: the error is measured on the true top 5,
			// not on the items whose estimates made them look top.
			top, _ = j.TopK(WindowAll, 1000)
			// Published once every kept event is counted with its weight.
			if top.Total == countedWeight(j) || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if top.Shed == 0 {
			t.Fatalf("seed %d: nothing shed", seed)
		}
		est := map[string]uint64{}
		for _, it := range top.Items {
			c := truth[it.Key]
			if it.Lower > c || it.Upper < c {
				t.Fatalf("seed %d: %s true %d outside [%d, %d]", seed, it.Key, c, it.Lower, it.Upper)
			}
			est[it.Key] = it.Estimate
		}
		for rank := range 5 {
			key := fmt.Sprintf("i%d", rank) // Zipf: i0 is the most frequent
			rels = append(rels, (float64(est[key])-float64(truth[key]))/float64(truth[key]))
		}
		_ = e.Close(context.Background())
	}
	// Unbiased: the mean error is within four standard errors of zero
	// (each run draws its own sample; most events are kept with p near
	// the floor of 1%, so single counts are noisy).
	var mean, sq float64
	for _, r := range rels {
		mean += r / float64(len(rels))
	}
	for _, r := range rels {
		sq += (r - mean) * (r - mean)
	}
	se := math.Sqrt(sq/float64(len(rels)-1)) / math.Sqrt(float64(len(rels)))
	t.Logf("mean relative error of the true top-5 counts over %d runs: %+.4f (standard error %.4f)", runs, mean, se)
	if math.Abs(mean) > 4*se || se > 0.05 {
		t.Fatalf("mean relative error %+.4f with standard error %.4f: biased", mean, se)
	}
}

// A batch that waited past max_delay/2 by the time its partition reaches
// it (here: the job was paused while events queued) loses its training
// events, counted as shed late; its predictions are still answered.
func TestStaleBatchesShedAtTheHead(t *testing.T) {
	const maxDelay = 10 * time.Millisecond
	e := testEngine(t, Config{QueueSize: 1 << 16})
	j := mustPut(t, e, Spec{Name: "m", Kind: "logreg", Input: "s", Partitions: 1,
		Params: map[string]any{"hash_bits": 12}, Shed: &ShedSpec{MaxDelay: maxDelay.String()}})
	sub := e.Hub().Subscribe([]string{"m"}, []string{TypePrediction}, 1<<16)
	defer e.Hub().Unsubscribe(sub)
	g := gen.New(gen.Config{Seed: 3})
	recs := make([]Record, 2000)
	labelled := 0
	for i := range recs {
		ev := g.Next()
		recs[i] = Record{Label: -1, Features: ev.Features(nil)}
		if i%2 == 0 {
			recs[i].Label = int8(b2i(ev.Label))
			labelled++
		}
	}
	// The batch must be older than max_delay/2 when the partition takes it:
	// (5ms ÷ 50ms)^4 is below the 1% floor, so about 1% is kept.
	queueStale(t, j, 5*maxDelay, func() { commitRecords(t, e, "s", recs) })
	st := j.Status(false).Shed
	if st == nil || st.Late != st.Shed || st.Late < uint64(labelled*9/10) || st.Late > uint64(labelled) {
		t.Fatalf("shed %+v, want about all %d training events shed late", st, labelled)
	}
	if want := float64(st.Shed) / float64(len(recs)); math.Abs(st.Fraction-want) > 1e-9 {
		t.Fatalf("fraction %v, want %v (late events were accepted once)", st.Fraction, want)
	}
	if st.Overdue != uint64(len(recs))-st.Late {
		t.Fatalf("overdue %d, want every event served (%d) after waiting 5 × max_delay", st.Overdue, uint64(len(recs))-st.Late)
	}
	// Every prediction is answered.
	deadline := time.Now().Add(5 * time.Second)
	for len(sub.C) < len(recs)-labelled && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := len(sub.C); got < len(recs)-labelled {
		t.Fatalf("%d of %d predictions answered", got, len(recs)-labelled)
	}
}

func TestStaleKeep(t *testing.T) {
	const d = 100 * time.Millisecond
	for _, c := range []struct {
		age  time.Duration
		want float64
	}{{0, 1}, {50 * time.Millisecond, 1}, {100 * time.Millisecond, 1.0 / 16}, {500 * time.Millisecond, minKeep}} {
		if got := staleKeep(c.age, d); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("staleKeep(%v, %v) = %v, want %v", c.age, d, got, c.want)
		}
	}
}

// countedWeight is the weight a heavy-hitter job counts once every kept
// event is processed, when every event shed late had weight 1: the events
// accepted and the weight added to those kept, less those shed late.
func countedWeight(j *Job) uint64 {
	return j.accepted.Load() + j.shed.extra.Load() - j.shed.late.Load()
}

// Heavy hitters shed late (a paused job, its batches past max_delay/2)
// keep about 1% of the events with weight 100: every bound still holds the
// true count.
func TestStaleHeavyHitterBatchesKeepBounds(t *testing.T) {
	const maxDelay = 10 * time.Millisecond
	e := testEngine(t, Config{QueueSize: 1 << 16})
	j := mustPut(t, e, Spec{Name: "h", Kind: "heavy_hitters", Input: "s", Partitions: 1,
		Params: map[string]any{"field": "item", "k": 20, "counters": 500}, Shed: &ShedSpec{MaxDelay: maxDelay.String()}})
	r := rand.New(rand.NewPCG(4, 2))
	z := rand.NewZipf(r, 1.2, 1, 199)
	truth := map[string]uint64{}
	vs := make([]*fastjson.Value, 5000)
	for i := range vs {
		item := fmt.Sprintf("i%d", z.Uint64())
		truth[item]++
		vs[i], _ = fastjson.Parse(fmt.Sprintf(`{"item":%q}`, item))
	}
	queueStale(t, j, 5*maxDelay, func() { commitValues(t, e, "s", vs) })
	var top TopK
	for deadline := time.Now().Add(5 * time.Second); ; {
		if top, _ = j.TopK(WindowAll, 500); top.Total == countedWeight(j) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("total %d, want %d", top.Total, countedWeight(j))
		}
		time.Sleep(time.Millisecond)
	}
	st := j.Status(false).Shed
	if st.Late < 4000 || st.Late != st.Shed || top.Shed != st.Shed {
		t.Fatalf("shed %+v, top shed %d", st, top.Shed)
	}
	for _, it := range top.Items {
		if c := truth[it.Key]; it.Lower > c || it.Upper < c {
			t.Fatalf("%s: true %d outside [%d, %d]", it.Key, c, it.Lower, it.Upper)
		}
	}
}

// queueStale queues events with commit while j is paused, holds them for
// age, then lets j process them all.
func queueStale(t *testing.T, j *Job, age time.Duration, commit func()) {
	t.Helper()
	j.Pause()
	queued := time.Now()
	commit()
	for time.Since(queued) < age {
		time.Sleep(time.Millisecond) // time passing, not synchronisation
	}
	j.Resume()
	waitIdle(t, j)
}
