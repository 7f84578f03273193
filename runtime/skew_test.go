package runtime

import (
	"fmt"
	"testing"
	"time"
)

// A job whose events are half of one key shows it: the hottest key, the
// partition it goes to, and that partition's load well above the mean.
func TestSkewShowsTheHotKey(t *testing.T) {
	e := testEngine(t, Config{Partitions: 4})
	j := mustPut(t, e, Spec{Name: "hh", Kind: "heavy_hitters", Input: "s", Partitions: 4, Params: map[string]any{"field": "u"}})
	lines := make([]string, 400)
	for i := range lines {
		key := "hot"
		if i%2 == 1 {
			key = fmt.Sprintf("k%d", i)
		}
		lines[i] = fmt.Sprintf(`{"key":%q,"u":"x"}`, key)
	}
	stop := make(chan struct{})
	sent := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				sent <- nil
				return
			default:
			}
			if _, err := ingest(e, "s", lines...); err != nil {
				sent <- err
				return
			}
		}
	}()
	defer func() {
		close(stop)
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sk := j.Status(false).Elastic.Skew
		// Half the events on one of 4 partitions: at least twice the mean.
		if sk != nil && sk.Imbalance >= 2 && len(sk.HotKeys) > 0 {
			hot := sk.HotKeys[0]
			if hot.Key != "hot" || hot.Partition != PartitionOf("hot", 4) {
				t.Fatalf("hottest key %+v, want hot on partition %d", hot, PartitionOf("hot", 4))
			}
			for _, l := range sk.Loads {
				if l > sk.Loads[hot.Partition] {
					t.Fatalf("loads %v: the hot key's partition is not the busiest", sk.Loads)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("skew %+v", sk)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
