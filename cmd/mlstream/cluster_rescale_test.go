package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mlstream/mlstream/internal/gen"
)

// patchPartitions sends PATCH /v1/jobs/{job} {"partitions": n} to node
// url and returns the status code and the JSON body.
func patchPartitions(t *testing.T, url, job string, n int) (int, map[string]any) {
	t.Helper()
	resp, err := patchRequest(url, job, n)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// patchRequest sends PATCH {"partitions": n} for job to node url (safe
// from any goroutine: it reports errors instead of failing the test).
func patchRequest(url, job string, n int) (*http.Response, error) {
	req, _ := http.NewRequest(http.MethodPatch, url+"/v1/jobs/"+job, bytes.NewReader(fmt.Appendf(nil, `{"partitions":%d}`, n)))
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

// elasticOf is a job's partition count and rescale generation as node url
// reports them.
func elasticOf(t *testing.T, url, job string) (partitions int, generation uint64) {
	t.Helper()
	var st struct {
		Partitions []struct{} `json:"partitions"`
		Elastic    struct {
			Generation uint64 `json:"generation"`
		} `json:"elastic"`
	}
	getJob(t, url, job, &st)
	return len(st.Partitions), st.Elastic.Generation
}

// A heavy-hitters job of three nodes is rescaled twice (6 → 3 by a PATCH
// on one node, 3 → 8 by a PUT on another) while clients keep posting to every node:
// every node runs the new count, and every acknowledged event is counted
// exactly once (held requests wait or are retried; nothing is lost with
// the old layout's streams, nothing counted twice in the new one).
func TestClusterRescaleMovesStateWhileIngesting(t *testing.T) {
	c := startTestCluster(t, 3)
	putJobAt(t, c.url(0), hhSpec)
	c.waitOwned(0, "top", 30*time.Second, "n1", "n2", "n3")
	sent := c.postRetrying(0, 30)
	waitTotal(t, c.url(2), "top", uint64(sent), 30*time.Second)

	var posted atomic.Int64
	posted.Store(int64(sent))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body := clickBody(100000*(w+1)+i*50, 50)
				if ok, err := retryingPost(t.Context(), c.url((w+i)%3), "clicks", body); !ok {
					t.Errorf("posting during a rescale: %v", err)
					return
				}
				posted.Add(50)
			}
		}()
	}
	for step, to := range []int{3, 8} {
		node := 1 + step
		if step == 0 {
			if code, body := patchPartitions(t, c.url(node), "top", to); code != http.StatusOK {
				t.Fatalf("PATCH to %d partitions on n%d: %d %v", to, node+1, code, body)
			}
		} else {
			// A PUT of the spec with another partition count rescales too.
			putJobAt(t, c.url(node), strings.Replace(hhSpec, `"partitions":6`, fmt.Sprintf(`"partitions":%d`, to), 1))
		}
		for i := range 3 {
			waitUntil(t, 30*time.Second, fmt.Sprintf("n%d running top with %d partitions", i+1, to), func() bool {
				n, gen := elasticOf(t, c.url(i), "top")
				return n == to && gen == uint64(step+1)
			})
		}
		c.waitOwned(0, "top", 30*time.Second, "n1", "n2", "n3")
	}
	close(stop)
	wg.Wait()
	// Requests without an Idempotency-Key to one node start at the job's
	// next partition each: 16 of them reach all 8.
	for range 16 {
		resp, err := http.Post(c.url(0)+"/v1/streams/clicks/events", "application/x-ndjson", bytes.NewReader(clickBody(0, 10)))
		if err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("post: %v %v", err, resp)
		}
		resp.Body.Close()
		posted.Add(10)
	}
	for i := range 3 {
		waitTotal(t, c.url(i), "top", uint64(posted.Load()), 60*time.Second)
	}
	t.Logf("%d events posted around two rescales, each counted once on every node", posted.Load())
	// Every node's skew is the cluster's: events routed to each partition
	// as its owner reports them, not only those this node owns.
	for i := range 3 {
		waitUntil(t, 10*time.Second, fmt.Sprintf("n%d's skew counting every partition's events", i+1), func() bool {
			var st struct {
				Elastic struct{ Skew struct{ Events []uint64 } }
			}
			getJob(t, c.url(i), "top", &st)
			ev := st.Elastic.Skew.Events
			return len(ev) == 8 && !slices.Contains(ev, 0)
		})
	}
}

// A logreg job's model moves with a rescale: the model (its updates and
// its predictions) is the same right after as right before, on every
// node, and it goes on learning with the new partition count.
func TestClusterRescaleKeepsTheModel(t *testing.T) {
	c := startTestCluster(t, 3)
	putJobAt(t, c.url(0), spamSpec)
	c.waitOwned(0, "spam", 30*time.Second, "n1", "n2", "n3")
	g := gen.New(gen.Config{Seed: 9})
	post := func(batches int) {
		for i := range batches {
			var body []byte
			for range 500 {
				ev := g.Next()
				body = append(ev.AppendJSON(body), '\n')
			}
			mustPostRetrying(t, c.url(i%3), "mail", body)
		}
	}
	updates := func(i int) int64 {
		var st struct{ Model struct{ Updates int64 } }
		getJob(t, c.url(i), "spam", &st)
		return st.Model.Updates
	}
	post(12)
	for i := range 3 {
		waitUntil(t, 60*time.Second, "the model holding 6,000 events", func() bool { return updates(i) >= 6000 })
	}
	test := make([]gen.Event, 500)
	for k := range test {
		test[k] = g.Next()
	}
	before := heldOutAccuracy(t, c.url(0), test)
	learned := updates(0)
	if code, body := patchPartitions(t, c.url(2), "spam", 2); code != http.StatusOK {
		t.Fatalf("PATCH: %d %v", code, body)
	}
	for i := range 3 {
		waitUntil(t, 30*time.Second, "the job with 2 partitions", func() bool { n, _ := elasticOf(t, c.url(i), "spam"); return n == 2 })
		if got := updates(i); got != learned {
			t.Errorf("n%d: the model holds %d updates after the rescale, %d before", i+1, got, learned)
		}
		if acc := heldOutAccuracy(t, c.url(i), test); math.Abs(acc-before) > 1e-9 {
			t.Errorf("n%d predicts with accuracy %.4f after the rescale, %.4f before: the model changed", i+1, acc, before)
		}
	}
	waitUntil(t, 30*time.Second, "both partitions owned", func() bool {
		o := c.owners(0, "spam")
		return o[""] == 0 && len(o) > 0
	})
	post(6)
	for i := range 3 {
		waitUntil(t, 60*time.Second, "the model learning after the rescale", func() bool { return updates(i) >= learned+3000 })
	}
}

// The coordinator's log lines before each step of a cluster rescale.
var rescaleSteps = []string{
	"rescaling job in the cluster: sealing",       // seal: ingest held on every node
	"every node holds the job's ingest; draining", // drain
	"rescale: drained; moving the state",          // move
	"rescale: new layout stored; committing",      // commit
	"job rescaled in the cluster",                 // after
}

// kill -9 of the node coordinating a rescale, as it logs each step (it
// goes on a little before the signal lands: the kill comes during the
// step): the survivors run the job with the partition count before the
// rescale or after it, never another, admit requests again (a seal whose
// coordinator died is abandoned by another node), and count every
// acknowledged event exactly once; the killed node rejoins.
func TestClusterKill9DuringRescale(t *testing.T) {
	c := startTestCluster(t, 3)
	putJobAt(t, c.url(0), hhSpec)
	c.waitOwned(0, "top", 30*time.Second, "n1", "n2", "n3")
	acked := c.postRetrying(0, 20)
	current := 6
	targets := []int{3, 7, 4, 9, 5}
	for run, step := range rescaleSteps {
		k := run % 3
		survivor := (k + 1) % 3
		logged := strings.Count(c.nodes[k].output(), step)
		// A 409 while the rescale the last kill interrupted is not yet
		// abandoned: asked again. Its coordinator is back by now (restarted
		// below), so the abandonment must not wait for the rescale
		// timeout (~40 s): 25 s of asking is all it gets.
		go func() {
			for deadline := time.Now().Add(25 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				resp, err := patchRequest(c.url(k), "top", targets[run])
				if err != nil {
					return // killed meanwhile
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusConflict {
					return
				}
			}
		}()
		waitUntil(t, 60*time.Second, "the coordinator logging "+step, func() bool {
			return strings.Count(c.nodes[k].output(), step) > logged
		})
		kill9(t, c.nodes[k])
		// Retirements the nodes logged (but the killed one, whose output
		// starts afresh when it is restarted).
		retired := func(but int) (n int) {
			for i, p := range c.nodes {
				if i != but {
					n += strings.Count(p.output(), fmt.Sprintf("msg=\"previous layout retired\" node=%s job=top", nodeName(i)))
				}
			}
			return n
		}
		retiredBefore := retired(k)
		// The survivors take requests again, whichever layout won.
		acked += mustPostRetrying(t, c.url(survivor), "clicks", clickBody(run*1000, 1000))
		var n int
		waitUntil(t, 60*time.Second, "the survivors agreeing on one layout", func() bool {
			a, _ := elasticOf(t, c.url(survivor), "top")
			b, _ := elasticOf(t, c.url((k+2)%3), "top")
			n = a
			return a == b
		})
		if n != current && n != targets[run] {
			t.Fatalf("killed at %q: the job has %d partitions, want %d (before) or %d (after)", step, n, current, targets[run])
		}
		t.Logf("killed the coordinator at %q: the job has %d partitions (was %d, asked %d)", step, n, current, targets[run])
		current = n
		waitTotal(t, c.url(survivor), "top", uint64(acked), 60*time.Second)
		c.restart(k)
		waitUntil(t, 60*time.Second, "the restarted node running the layout", func() bool {
			n, _ := elasticOf(t, c.url(k), "top")
			return n == current
		})
		waitTotal(t, c.url(k), "top", uint64(acked), 60*time.Second)
		c.waitOwned(0, "top", 60*time.Second, "n1", "n2", "n3")
		if step == rescaleSteps[3] && n == targets[run] {
			// Committed, and its coordinator died before it retired the old
			// layout: another node does (a survivor, or the restarted one,
			// whichever comes first) once the coordinator's time is up.
			waitUntil(t, 90*time.Second, "another node retiring the old layout", func() bool { return retired(-1) > retiredBefore })
		}
	}
}

// The autoscaler of a clustered job: one node (the owner of partition 0)
// measures the job across the nodes and decides; with a trickle of
// events on 4 partitions it scales the job down to its min on every node,
// the decision (with the cluster's cores) in every node's status, every
// node lists the decider's later decisions too, and every acknowledged
// event counted once.
func TestClusterAutoscalerScalesDown(t *testing.T) {
	c := startTestCluster(t, 3, "--autoscale-interval", "300ms")
	putJobAt(t, c.url(0), `{"name":"auto","kind":"heavy_hitters","input":"clicks","partitions":4,"params":{"field":"item"},
		"autoscale":{"min":1,"max":8,"cooldown":"1s"}}`)
	var posted atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond): // a trickle: the input rate is what is tested
			}
			if ok, err := retryingPost(t.Context(), c.url(i%3), "clicks", clickBody(i*20, 20)); !ok {
				t.Errorf("posting: %v", err)
				return
			}
			posted.Add(20)
		}
	}()
	for i := range 3 {
		waitUntil(t, 90*time.Second, fmt.Sprintf("n%d running the job with 1 partition", i+1), func() bool {
			n, _ := elasticOf(t, c.url(i), "auto")
			return n == 1
		})
	}
	// Every node lists the decider's decisions (it announces them), holds
	// at the minimum included, not only those that led to a rescale.
	for i := range 3 {
		waitUntil(t, 30*time.Second, fmt.Sprintf("n%d listing the decider's holds", i+1), func() bool {
			var st struct {
				Elastic struct {
					Autoscale struct {
						Decisions []struct{ Action, Reason string }
					}
				}
			}
			getJob(t, c.url(i), "auto", &st)
			holds := 0
			for _, d := range st.Elastic.Autoscale.Decisions {
				if d.Action == "hold" && d.Reason != "another node decides" && d.Reason != "first measure" {
					holds++
				}
			}
			return holds >= 2
		})
	}
	close(stop)
	<-done
	for i := range 3 {
		var st struct {
			Elastic struct {
				Last []struct {
					From, To int
					Reason   string
					Decision *struct {
						Action string
						Cores  int
					}
				}
			}
		}
		getJob(t, c.url(i), "auto", &st)
		if len(st.Elastic.Last) == 0 {
			t.Fatalf("n%d: no rescale in the status", i+1)
		}
		last := st.Elastic.Last[len(st.Elastic.Last)-1]
		if last.To != 1 || last.Decision == nil || last.Decision.Action != "down" || last.Decision.Cores < 3 {
			t.Errorf("n%d: the last rescale %+v (decision %+v), want the autoscaler's down to 1 with the cluster's cores", i+1, last, last.Decision)
		}
	}
	for i := range 3 {
		waitTotal(t, c.url(i), "auto", uint64(posted.Load()), 60*time.Second)
	}
}

// A distinct count and a join move with a rescale of a cluster as in one
// process: the HyperLogLog estimate is the same before and after a split
// (4 → 6) and a merge (6 → 2) on every node, and the join's buffered
// tuples, re-hashed by key, match the views that come after the rescale
// as a single-node server that was never rescaled matches them.
func TestClusterRescaleDistinctAndJoin(t *testing.T) {
	c := startTestCluster(t, 3)
	single := start(t, "serve", "--addr", "127.0.0.1:0", "--data", "", "--partitions", "6")
	const users = `{"name":"users","kind":"distinct","input":"clicks","partitions":4,"params":{"field":"user"}}`
	const pairs = `{"name":"pairs","kind":"join","left":"clicks","right":"views","partitions":3,"params":{"on":"user","within":"10m"}}`
	putJobAt(t, c.url(0), users)
	putJobAt(t, c.url(1), pairs)
	putJobAt(t, single.url(), pairs)
	c.waitOwned(0, "users", 30*time.Second, "n1", "n2", "n3")
	c.waitOwned(0, "pairs", 30*time.Second, "n1", "n2", "n3")
	const posts, perPost = 10, 300
	for i := range posts {
		body := clickFields(i*perPost, perPost, "user")
		mustPostRetrying(t, c.url(i%3), "clicks", body)
		postNDJSON(t, single.url(), "clicks", body)
	}
	estimate := func(i int) uint64 {
		d, err := clientOf(t, c.url(i)).Distinct(t.Context(), "users", "")
		if err != nil {
			t.Fatal(err)
		}
		return d.Estimate
	}
	// Each node counts what its partitions took in (a partition that moved
	// counts on both nodes): the estimate is read once every click is in.
	waitUntil(t, 30*time.Second, "the nodes processing every click", func() bool {
		var sum uint64
		for i := range 3 {
			sum += getJob(t, c.url(i), "users", nil).Processed
		}
		return sum >= posts*perPost
	})
	var want uint64
	waitUntil(t, 30*time.Second, "every node's estimate the same", func() bool {
		want = estimate(0)
		return want > 0 && estimate(1) == want && estimate(2) == want
	})
	for _, to := range []int{6, 2} {
		if code, body := patchPartitions(t, c.url(to%3), "users", to); code != http.StatusOK {
			t.Fatalf("PATCH users to %d: %d %v", to, code, body)
		}
		for i := range 3 {
			waitUntil(t, 30*time.Second, "the rescaled distinct job", func() bool { n, _ := elasticOf(t, c.url(i), "users"); return n == to })
			if got := estimate(i); got != want {
				t.Errorf("users at %d partitions: n%d estimates %d distinct, %d before", to, i+1, got, want)
			}
		}
	}
	if code, body := patchPartitions(t, c.url(2), "pairs", 5); code != http.StatusOK {
		t.Fatalf("PATCH pairs: %d %v", code, body)
	}
	for i := range 3 {
		waitUntil(t, 30*time.Second, "the rescaled join", func() bool { n, _ := elasticOf(t, c.url(i), "pairs"); return n == 5 })
	}
	var views []byte
	clicksOf := map[int]uint64{}
	for k := range posts * perPost {
		clicksOf[k%1013]++ // clickFields' user of event k
	}
	var wantMatches uint64
	for u := range 200 {
		views = fmt.Appendf(views, `{"user":"u%d"}`+"\n", u*5)
		wantMatches += clicksOf[u*5]
	}
	mustPostRetrying(t, c.url(0), "views", views)
	postNDJSON(t, single.url(), "views", views)
	matches := func(url string) uint64 {
		m, err := clientOf(t, url).Matches(t.Context(), "pairs", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		return m.Matches
	}
	// The expected count comes from the streams, not from the single-node
	// server: read while that server still joins, its count was a partial one.
	waitUntil(t, 30*time.Second, fmt.Sprintf("the single-node join's %d matches", wantMatches), func() bool { return matches(single.url()) == wantMatches })
	for i := range 3 {
		waitUntil(t, 30*time.Second, fmt.Sprintf("n%d's join matching as the single-node one (%d)", i+1, wantMatches), func() bool {
			return matches(c.url(i)) == wantMatches
		})
	}
}
