package main

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/mlstream/mlstream/synopses"
)

// synopsesTables measures heavy hitters against exact counting in a Go map
// on the same Zipf stream, and HyperLogLog's error against its precision.
func synopsesTables(quick bool, reps int) {
	n := 2_000_000
	if quick {
		n = 500_000
	}
	stream := zipfNames(n)
	heavyHittersTable(stream, reps)
	distinctTable(stream, quick, reps)
}

// heavyHittersTable: Space-Saving of several sizes against a Go map, in
// time, memory and the quality of its top 100.
func heavyHittersTable(stream []string, reps int) {
	n, universe := len(stream), 100_000
	exact := map[string]uint64{}
	for _, s := range stream {
		exact[s]++
	}
	keys := make([]string, 0, len(exact))
	for k := range exact {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return int(exact[b]) - int(exact[a]) })

	t := newTable("synopses", "Synopses: heavy hitters against exact counting",
		fmt.Sprintf("%s items drawn Zipf(1.1) from %s; one core; median of %d runs. ns/item is wall-clock time, CPU ns/item the process's CPU time over the same loop (what a shared machine's other load inflates least: the wall figure also counts waiting for a core). Recall and precision of the top 100 against the exact counts; \"bounds hold\" checks every reported item's [lower, upper] against its true count.", humanize(float64(n)), humanize(float64(universe)), reps),
		"summary", "ns/item", "CPU ns/item", "memory", "top-100 recall", "top-100 precision", "bounds hold", "target")
	mapNs, mapCPU := medianTimed(reps, n, func() {
		m := map[string]uint64{}
		for _, s := range stream {
			m[s]++
		}
	})
	t.Row("exact (Go map)", num(mapNs, "%.1f"), num(mapCPU, "%.1f"), bytesOf(func() any {
		m := map[string]uint64{}
		for _, s := range stream {
			m[s]++
		}
		return m
	}), "1.00", "1.00", "yes", "")
	truth := map[string]bool{}
	for _, k := range keys[:100] {
		truth[k] = true
	}
	for _, counters := range []int{500, 2000, 10000} {
		spaceSavingRow(t, stream, counters, exact, truth, reps)
	}
	t.Print()
}

// spaceSavingRow measures Space-Saving with counters counters on the
// stream: time, memory, recall and precision of its top 100 against truth,
// and whether every item's bounds hold its exact count.
func spaceSavingRow(t *Table, stream []string, counters int, exact map[string]uint64, truth map[string]bool, reps int) {
	var hh *synopses.HeavyHitters
	ns, cpu := medianTimed(reps, len(stream), func() {
		hh = synopses.NewHeavyHitters(counters)
		for _, s := range stream {
			hh.Update(s, 1)
		}
	})
	top := hh.TopK(100)
	hits, ok := 0, true
	for _, it := range hh.Items() {
		if c := exact[it.Key]; c < it.Lower || c > it.Upper {
			ok = false
		}
	}
	for _, it := range top {
		if truth[it.Key] {
			hits++
		}
	}
	target := ""
	if counters == 2000 {
		target = "recall >= 0.99, <= 50 ns/item"
	}
	t.Row(fmt.Sprintf("Space-Saving, %d counters", counters), num(ns, "%.1f"), num(cpu, "%.1f"),
		bytesOf(func() any {
			h := synopses.NewHeavyHitters(counters)
			for _, s := range stream {
				h.Update(s, 1)
			}
			return h
		}), num(float64(hits)/100, "%.2f"), num(float64(hits)/float64(len(top)), "%.2f"), yes(ok), target)
}

// medianTimed runs f reps times and returns the medians of its wall-clock
// and CPU time, in ns per item of n.
func medianTimed(reps, n int, f func()) (wall, cpu float64) {
	walls, cpus := make([]float64, reps), make([]float64, reps)
	for i := range reps {
		start, startCPU := time.Now(), cpuTime()
		f()
		walls[i] = float64(time.Since(start).Nanoseconds()) / float64(n)
		cpus[i] = float64((cpuTime() - startCPU).Nanoseconds()) / float64(n)
	}
	return mid(walls), mid(cpus)
}

// distinctTable: HyperLogLog's error, memory and insert cost against its
// precision.
func distinctTable(stream []string, quick bool, reps int) {
	t := newTable("synopses", "Synopses: HyperLogLog error against precision",
		"Median and largest relative error of the estimate over 20 seeded streams per cardinality (distinct 64-bit hashes); standard error 1.04/sqrt(2^p); insert cost on strings, hashing included.",
		"precision", "memory", "std error", "n = 1,000", "n = 100,000", "n = 1,000,000", "ns/insert")
	for _, p := range []uint8{10, 12, 14, 16} {
		row := []string{}
		for _, card := range []int{1_000, 100_000, 1_000_000} {
			if quick && card == 1_000_000 {
				row = append(row, "-")
				continue
			}
			var errs []float64
			for seed := range 20 {
				d, _ := synopses.NewDistinct(p)
				for i := range card {
					d.InsertHash(mix(uint64(seed)<<32 | uint64(i)))
				}
				errs = append(errs, math.Abs(float64(d.Estimate())-float64(card))/float64(card))
			}
			row = append(row, fmt.Sprintf("%.2f%% (max %.2f%%)", 100*mid(errs), 100*slices.Max(errs)))
		}
		d, _ := synopses.NewDistinct(p)
		ns := median(reps, func() float64 {
			start := time.Now()
			for _, s := range stream {
				d.InsertString(s)
			}
			return float64(time.Since(start).Nanoseconds()) / float64(len(stream))
		})
		t.Row(int(p), humanize(float64(d.MemoryBytes()))+" B", num(100*d.StdError(), "%.2f%%"), row[0], row[1], row[2], num(ns, "%.1f"))
	}
	t.Print()
}

// mix is splitmix64's finaliser: distinct inputs give distinct,
// well-spread 64-bit hashes.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}

// bytesOf is the live heap that what f builds keeps (the item strings
// themselves are shared with the stream and not counted).
func bytesOf(f func() any) string {
	d := heapDelta(f)
	if d <= 0 {
		return "-"
	}
	return humanize(float64(d)) + " B"
}
