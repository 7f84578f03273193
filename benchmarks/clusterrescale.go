package main

import (
	"context"
	"fmt"
	"maps"
	"time"
)

// clusterRescale is the table of rescales in cluster mode: a heavy-hitters
// job on three nodes, filled with 100,000 distinct items, is rescaled
// 6 → 3 → 6 … reps times from the nodes in turn, idle and while a trickle
// of events streams in; the pause and its parts as the rescale reports
// them, and every acknowledged event counted (on every node) at the end.
func clusterRescale(bin string, reps int) {
	t := newTable("cluster-rescale", "Cluster mode: the pause of a rescale",
		fmt.Sprintf("A heavy-hitters job of 6 partitions on three nodes (loopback, --lease-ttl 2s), filled with 100,000 distinct items, is rescaled 6 → 3 → 6 … %d times by PATCH on the nodes in turn; medians. The pause is from the seal (every node holds the job's ingest) to the commit: drain (every partition's backup holds its last event: owners write a changed partition's state within a second), move (the coordinator restores the backups and moves the state by key), store (the new layout's state written). While streaming, a client posts 100 events every 50 ms to any node, retrying with the same Idempotency-Key; acknowledged and counted are its totals at the end (every node must count each acknowledged event once).", reps),
		"counters per partition", "ingest", "pause ms", "drain ms", "move ms", "store ms", "acknowledged", "counted (min over nodes)")
	for _, counters := range []int{500, 20000} {
		clusterRescaleRows(t, bin, reps, counters)
	}
	t.Print()
}

func clusterRescaleRows(t *Table, bin string, reps, counters int) {
	spec := hhJobSpec()
	spec.Params = maps.Clone(spec.Params)
	spec.Params["counters"] = counters
	bc, err := launchCluster(bin, threeNodes, spec)
	if err != nil {
		fmt.Println("cluster-rescale:", err)
		return
	}
	defer bc.close()
	acked, err := fillDistinct(bc, 100_000)
	if err != nil {
		fmt.Println("cluster-rescale: filling:", err)
		return
	}
	for _, streaming := range []bool{false, true} {
		var tr *trickle
		if streaming {
			tr = startTrickle(bc)
		}
		var pause, drain, move, store []float64
		for i := range reps {
			to := 3
			if i%2 == 1 {
				to = 6
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			st, err := bc.nodes[i%len(bc.nodes)].c.Rescale(ctx, hhJob, to)
			cancel()
			if err != nil || st.Elastic == nil || len(st.Elastic.Last) == 0 {
				fmt.Printf("cluster-rescale: rescale %d to %d: %v\n", i+1, to, err)
				continue
			}
			r := st.Elastic.Last[len(st.Elastic.Last)-1]
			pause, drain, move, store = append(pause, r.PauseMs), append(drain, r.DrainMs), append(move, r.MoveMs), append(store, r.BackupMs)
		}
		ingest := "idle"
		if tr != nil {
			tr.end()
			acked += tr.acked.Load()
			ingest = "streaming"
		}
		t.Row(counters, ingest, num(mid(pause), "%.0f"), num(mid(drain), "%.0f"), num(mid(move), "%.1f"), num(mid(store), "%.1f"),
			acked, minCounted(bc, acked))
	}
}

// fillDistinct posts n distinct items to the heavy-hitters stream and
// returns the events acknowledged.
func fillDistinct(bc *benchCluster, n int) (uint64, error) {
	var acked uint64
	for b := 0; b*1000 < n; b++ {
		var body []byte
		for i := b * 1000; i < min(n, (b+1)*1000); i++ {
			body = fmt.Appendf(body, "{\"item\":\"fill-%d\"}\n", i)
		}
		got, err := bc.postAnywhere(hhStream, body, fmt.Sprintf("fill-%d", b), b, 30*time.Second)
		if err != nil {
			return acked, err
		}
		acked += uint64(got)
	}
	return acked, nil
}

// minCounted waits until every node counts acked events (or its count
// stops short for 20 s) and returns the least count.
func minCounted(bc *benchCluster, acked uint64) uint64 {
	least := acked
	for _, nd := range bc.nodes {
		got, err := waitCounted(nd, acked, 20*time.Second)
		if err == nil {
			got = stableTotal(nd, got)
		}
		least = min(least, got)
	}
	return least
}
