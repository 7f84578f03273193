package main

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/client"
)

// kill -9 of the real binary while it rescales a job (PATCH) with fault
// tolerance exact: every restart finds the job with the partition count
// before the rescale or after it, never another, and every acknowledged
// event counted once. The kill comes at a different moment after the
// PATCH in each run (before the rescale started, while its queues drain,
// while the new layout is backed up, after it), with state large enough
// that a rescale takes a while.
func TestKill9DuringRescaleRecoversOneLayout(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, `{"jobs":[{"name":"top","kind":"heavy_hitters","input":"clicks","partitions":2,
		"params":{"field":"item","counters":50000},"ft":{"mode":"exact"}}]}`)
	acked, partitions := 0, []int{2} // the counts the job may have now
	targets := []int{5, 3, 6, 2, 4}
	delays := []time.Duration{0, 10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond, 1500 * time.Millisecond}
	var seen []int
	midway := 0 // kills that came between the start of a rescale and its end
	for run := 0; ; run++ {
		p := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", dir)
		url := p.url()
		var view struct {
			Partitions []struct{} `json:"partitions"`
		}
		getJob(t, url, "top", &view)
		n := len(view.Partitions)
		if !slices.Contains(partitions, n) {
			t.Fatalf("run %d: the job has %d partitions, want one of %v", run, n, partitions)
		}
		seen = append(seen, n)
		top, err := clientOf(t, url).TopK(t.Context(), "top", 10, client.WindowAll)
		if err != nil {
			t.Fatal(err)
		}
		if top.Total != uint64(acked) {
			t.Fatalf("run %d (%d partitions): counted %d events, %d were acknowledged", run, n, top.Total, acked)
		}
		if run == len(targets) {
			break
		}
		var body []byte
		for i := range 20000 {
			body = fmt.Appendf(body, "{\"item\":\"i%d\"}\n", (run*20000+i)%60000)
		}
		acked += postNDJSON(t, url, "clicks", body)
		to := targets[run]
		sent := make(chan struct{})
		go func() {
			req, _ := http.NewRequest("PATCH", url+"/v1/jobs/top", bytes.NewReader(fmt.Appendf(nil, `{"partitions":%d}`, to)))
			req.Header.Set("Content-Type", "application/json")
			close(sent)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		<-sent
		time.Sleep(delays[run]) // when the crash comes, not synchronisation
		kill9(t, p)
		if out := p.output(); strings.Contains(out, "rescaling job") && !strings.Contains(out, "job rescaled") {
			midway++
		}
		partitions = []int{n, to}
	}
	t.Logf("partitions at each restart: %v (targets %v); %d of %d kills came during a rescale", seen, targets, midway, len(targets))
}
