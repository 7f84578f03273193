package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mlstream/mlstream/ft"
	"github.com/mlstream/mlstream/internal/gen"
	"github.com/valyala/fastjson"
)

// BenchmarkFTModes is the in-process cost of fault tolerance per event, in
// each mode with the default bounds, over pre-parsed requests of 1,000
// events into 2 partitions: heavy hitters (whose events cost least, so
// that the bookkeeping shows most) and logreg (whose backups are largest).
// Compare the modes as ratios within one run.
func BenchmarkFTModes(b *testing.B) {
	const perReq = 1000
	items := make([]*fastjson.Value, 100*perReq)
	var a fastjson.Arena
	for i := range items {
		// Zipf-like: item i%k with k from a skewed mix.
		o := a.NewObject()
		o.Set("item", a.NewString(fmt.Sprintf("i%d", (i*i)%1009%(1+i%97))))
		items[i] = o
	}
	g := gen.New(gen.Config{Seed: 5})
	events := make([]*fastjson.Value, 100*perReq)
	for i := range events {
		events[i] = fastjson.MustParseBytes(g.Next().AppendJSON(nil))
	}
	for _, w := range []struct {
		kind   string
		params map[string]any
		vs     []*fastjson.Value
	}{
		{"heavy_hitters", map[string]any{"field": "item", "counters": 2000}, items},
		{"logreg", map[string]any{"hash_bits": 18}, events},
	} {
		for _, mode := range []string{ft.ModeNone, ft.ModeApprox} {
			b.Run(w.kind+"/"+mode, func(b *testing.B) {
				benchFTMode(b, Spec{Name: "j", Kind: w.kind, Input: "s", Partitions: 2, Params: w.params, FT: FTSpec{Mode: mode}}, w.vs, perReq)
			})
		}
	}
}

func benchFTMode(b *testing.B, spec Spec, vs []*fastjson.Value, perReq int) {
	e := ftEngine(b, b.TempDir()) // spec.Partitions overrides its 1
	defer e.Close(context.Background())
	if _, err := e.PutJob(spec); err != nil {
		b.Fatal(err)
	}
	j, _ := e.Job(spec.Name)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i += perReq {
		off := i % len(vs)
		bt, err := e.NewBatch("s")
		if err != nil {
			b.Fatal(err)
		}
		bt.Expect(perReq)
		for k, v := range vs[off : off+perReq] {
			if err := bt.Add(v, k+1); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := bt.Commit(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	for j.depth() != 0 {
		time.Sleep(100 * time.Microsecond)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	if st := j.Status(false); st.FT != nil {
		b.ReportMetric(float64(st.FT.Backups.Full+st.FT.Backups.Delta)/float64(b.N)*1e6, "backups/Mevent")
	}
}
