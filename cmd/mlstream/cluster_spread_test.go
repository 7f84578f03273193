package main

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Hot-key spreading in cluster mode: two heavy-hitters jobs read one
// stream whose requests hold one key in 30% of their events; the job
// with spread sends that key's events over every partition (hot in each
// request), the other to the key's one. Both count every event once on
// both nodes, retries included; the spread job's partitions are even.
func TestClusterSpreadsHotKeys(t *testing.T) {
	_, nodes := startExternalPair(t)
	u0, u1 := nodes[0].url(), nodes[1].url()
	for _, spec := range []string{
		`{"name":"even","kind":"heavy_hitters","input":"clicks","partitions":4,"params":{"field":"item","key_field":"user"},"spread":{"above":0.1},"ft":{"mode":"approx"}}`,
		`{"name":"skewed","kind":"heavy_hitters","input":"clicks","partitions":4,"params":{"field":"item","key_field":"user"},"ft":{"mode":"approx"}}`,
	} {
		putJobAt(t, u0, spec)
		getJob(t, u1, jobNameOf(t, spec), nil)
	}
	sent := 0
	for r := range 20 {
		var body []byte
		for i := range 500 {
			user := fmt.Sprint("u", r*500+i)
			if i%10 < 3 {
				user = "hot"
			}
			body = fmt.Appendf(body, `{"item":"i%d","user":%q}`+"\n", i%97, user)
		}
		sent += mustPostRetrying(t, []string{u0, u1}[r%2], "clicks", body)
	}
	imbalance := map[string]float64{}
	for _, job := range []string{"even", "skewed"} {
		for _, u := range []string{u0, u1} {
			waitTotal(t, u, job, uint64(sent), 30*time.Second)
		}
		waitUntil(t, 10*time.Second, job+"'s skew counting every event", func() bool {
			var st struct {
				Elastic struct {
					Skew struct {
						Events  []uint64
						Spread  *struct{ Keys []string }
						HotKeys []struct{ Key string } `json:"hot_keys"`
					}
				}
			}
			getJob(t, u0, job, &st)
			var total, most uint64
			for _, e := range st.Elastic.Skew.Events {
				total, most = total+e, max(most, e)
			}
			if total != uint64(sent) {
				return false
			}
			imbalance[job] = float64(most) / (float64(total) / 4)
			if job == "even" && (st.Elastic.Skew.Spread == nil || !slices.Equal(st.Elastic.Skew.Spread.Keys, []string{"hot"})) {
				t.Fatalf("spread status %+v, want key hot", st.Elastic.Skew.Spread)
			}
			if hk := st.Elastic.Skew.HotKeys; len(hk) == 0 || hk[0].Key != "hot" {
				t.Fatalf("hot keys %+v, want hot first (the keys the node took in)", hk)
			}
			return true
		})
	}
	if imbalance["even"] > 1.15 || imbalance["skewed"] < 1.5 {
		t.Fatalf("imbalance (busiest partition over the mean): %v, want even's under 1.15 and skewed's over 1.5", imbalance)
	}
	t.Logf("imbalance with and without spread: %.2f, %.2f", imbalance["even"], imbalance["skewed"])
}
