package main

import (
	"bytes"
	"context"
	"fmt"
	"os"

	"github.com/mlstream/mlstream/runtime"
)

// elasticTable: the pause of a live rescale (runtime.Engine.Rescale)
// against the size of the state that moves, without and with fault
// tolerance (which backs the new layout up in full before ingest resumes).
func elasticTable(quick bool, reps int) {
	scale := 1
	if quick {
		scale = 4
	}
	t := newTable("elastic", "Elastic jobs: the pause of a rescale against state size",
		fmt.Sprintf("A job of 4 partitions is filled, then rescaled 4 → 8 → 4 … %d times; median per rescale. The pause is how long the job's ingest was held: drain (the queues, empty here) + move (the kind redistributes its state by key) + backup (fault tolerance approx: the new layout's full backup, fsynced) + starting the new partitions. \"Backup\" is the new layout's full backup size.", 2*reps),
		"kind", "state", "fault tolerance", "pause ms", "move ms", "backup ms", "backup")
	for _, w := range elasticWorkloads(scale) {
		for _, withFT := range []bool{false, true} {
			elasticRow(t, w, withFT, reps)
		}
	}
	t.Print()
}

// elasticWorkload is a job and the events that fill its state.
type elasticWorkload struct {
	state string
	spec  runtime.Spec
	reqs  []request
	n     int
}

func elasticWorkloads(scale int) []elasticWorkload {
	var out []elasticWorkload
	add := func(state string, spec runtime.Spec, n int, line func(i int) string) {
		var b bytes.Buffer
		for i := range n {
			b.WriteString(line(i))
			b.WriteByte('\n')
		}
		spec.Name, spec.Input, spec.Partitions = "el", "s", 4
		if spec.Kind == "join" {
			spec.Input, spec.Left, spec.Right = "", "s", "r"
		}
		out = append(out, elasticWorkload{state: state, spec: spec, reqs: chunk("s", b.Bytes()), n: n})
	}
	for _, counters := range []int{2_000, 100_000} {
		add(fmt.Sprintf("%s counters × 4", humanize(float64(counters))),
			runtime.Spec{Kind: "heavy_hitters", Params: map[string]any{"field": "u", "counters": counters}},
			8*counters/scale, func(i int) string { return fmt.Sprintf(`{"key":"k%d","u":"i%d"}`, i, i%(2*counters)) })
	}
	for _, bits := range []int{16, 22} {
		add(fmt.Sprintf("2^%d slots", bits),
			runtime.Spec{Kind: "logreg", Params: map[string]any{"hash_bits": bits}},
			200_000/scale, func(i int) string {
				return fmt.Sprintf(`{"key":"k%d","label":%d,"features":{"f%d":1,"g%d":2}}`, i, i%2, i%50_000, i%977)
			})
	}
	for _, prec := range []int{14, 18} {
		add(fmt.Sprintf("precision %d × 4", prec),
			runtime.Spec{Kind: "distinct", Params: map[string]any{"field": "u", "precision": prec}},
			200_000/scale, func(i int) string { return fmt.Sprintf(`{"key":"k%d","u":"i%d"}`, i, i) })
	}
	for _, tuples := range []int{50_000, 500_000} {
		add(fmt.Sprintf("%s buffered tuples", humanize(float64(tuples/scale))),
			runtime.Spec{Kind: "join", Params: map[string]any{"on": "k", "within": "24h", "max_state": "1GiB"}},
			tuples/scale, func(i int) string { return fmt.Sprintf(`{"k":"k%d","ts":%d}`, i, 1_700_000_000_000+int64(i)) })
	}
	return out
}

// elasticRow fills a job of w, rescales it 2·reps times and adds the
// medians.
func elasticRow(t *Table, w elasticWorkload, withFT bool, reps int) {
	dir := ""
	spec := w.spec
	mode := "none"
	if withFT {
		var err error
		if dir, err = os.MkdirTemp("", "mlstream-elastic-"); err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		mode = "approx"
		spec.FT = runtime.FTSpec{Mode: "approx"}
	}
	e, _, _ := feedEngine(w.reqs, w.n, spec, dir)
	defer e.Close(context.Background())
	var pause, move, backup []float64
	var backupBytes float64
	for i := range 2 * reps {
		to := 8
		if i%2 == 1 {
			to = 4
		}
		rep, err := e.Rescale(context.Background(), spec.Name, to, "benchmark")
		if err != nil {
			panic(err)
		}
		pause, move, backup = append(pause, rep.PauseMs), append(move, rep.MoveMs), append(backup, rep.BackupMs)
		if j, err := e.Job(spec.Name); err == nil && j.Status(false).FT != nil {
			backupBytes = float64(j.Status(false).FT.Backups.Bytes)
		}
	}
	size := "–"
	switch {
	case !withFT:
	case backupBytes >= 1<<20:
		size = fmt.Sprintf("%.1f MiB", backupBytes/(1<<20))
	default:
		size = fmt.Sprintf("%.0f KiB", backupBytes/(1<<10))
	}
	t.Row(spec.Kind, w.state, mode, num(mid(pause), "%.1f"), num(mid(move), "%.1f"), num(mid(backup), "%.1f"), size)
}

// spreadTable: the imbalance of a keyed stream whose top key holds 30% of
// the events, over 8 partitions, without and with hot-key spreading.
func spreadTable(quick bool) {
	n := 400_000
	if quick {
		n = 100_000
	}
	var b bytes.Buffer
	for i := range n {
		key := fmt.Sprintf("u%d", i%997)
		if i%10 < 3 {
			key = "hot"
		}
		fmt.Fprintf(&b, "{\"key\":%q,\"u\":\"i%d\"}\n", key, i%5000)
	}
	reqs := chunk("s", b.Bytes())
	t := newTable("elastic-spread", "Elastic jobs: the imbalance of a hot key, without and with spreading",
		fmt.Sprintf("A heavy_hitters job of 8 partitions fed %s keyed events, 30%% of them of one key and the rest over 997 keys; imbalance: the busiest partition's events over the mean (elastic.skew.events); target below 1.3 with spreading, from over 2 without.", humanize(float64(n))),
		"spread", "imbalance", "hot keys", "events spread", "events/s", "target")
	for _, spread := range []*runtime.SpreadSpec{nil, {Above: 0.05}} {
		spec := runtime.Spec{Name: "sp", Kind: "heavy_hitters", Input: "s", Partitions: 8, Spread: spread, Params: map[string]any{"field": "u"}}
		e, job, rate := feedEngine(reqs, n, spec, "")
		sk := job.Status(false).Elastic.Skew
		var most, sum uint64
		for _, c := range sk.Events {
			most, sum = max(most, c), sum+c
		}
		name, target, keys, spreadEvents := "off", "> 2", "-", "-"
		if spread != nil {
			name, target = fmt.Sprintf("above %.2f", spread.Above), "< 1.3"
			keys, spreadEvents = fmt.Sprint(sk.Spread.Keys), humanize(float64(sk.Spread.Events))
		}
		t.Row(name, num(float64(most)/(float64(sum)/float64(len(sk.Events))), "%.2f"), keys, spreadEvents, rate, target)
		e.Close(context.Background())
	}
	t.Print()
}
