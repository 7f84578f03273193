package main

// Browser tests that the dashboard tells the truth: it judges staleness on
// the server's clock, shows the service's verdict on a job, and opens a
// new job's charts on its data.

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/internal/testaddr"
)

// A headless capture with --virtual-time-budget runs the page's clock
// ahead of the service's (virtual time races through the page's timers):
// a page judging staleness by the browser's clock said "stats late" on
// every badge. On the server's clock, none is late.
func TestDashboardCaptureWithVirtualTime(t *testing.T) {
	chromium := chromiumPath(t)
	srv := start(t, "demo", "--addr", testaddr.Free(t), "--data", t.TempDir(), "--rate", "2000")
	url := srv.url()
	c := clientOf(t, url)
	// The demo's jobs have sent stats for a few seconds.
	waitUntil(t, 30*time.Second, "the demo's job "+demoJob+" to process for 3 s", func() bool {
		st, err := c.Job(t.Context(), demoJob)
		return err == nil && st.Processed > 0 && time.Since(st.Created) > 3*time.Second
	})
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=8000", "--dump-dom", url+"/")
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	badges := regexp.MustCompile(`<li[^>]*data-job="([^"]+)"[^>]*data-health="([a-z]+)"[\s\S]*?class="health badge [a-z]+"[^>]*>([^<]*)<`).FindAllStringSubmatch(string(dom), -1)
	if len(badges) < 4 {
		t.Fatalf("the capture shows %d job badges, want the demo's 4:\n%s", len(badges), dom)
	}
	for _, b := range badges {
		if text := b[3]; strings.Contains(text, "stats late") || strings.Contains(text, "no stats") || b[2] == "unknown" {
			t.Errorf("job %s: badge %q (%s) in a capture with virtual time", b[1], text, b[2])
		}
	}
}

// The page shows the service's verdict on a job (its status's health),
// judges staleness on the server's clock while the browser's runs a
// minute ahead, and a job put while the page is open gets charts whose
// time axis starts at its first point, not 50 s of empty axis before it.
func TestDashboardTellsTheTruth(t *testing.T) {
	b := newBrowser(t)
	srv := start(t, "demo", "--addr", testaddr.Free(t), "--data", t.TempDir(), "--rate", "2000")
	url := srv.url()
	b.do("loading the dashboard", chromedp.Navigate(url+"/"))
	b.waitFor("the feed connects", `s.conn === "live" && s.jobs.length >= 4`, nil, 30*time.Second)

	// The service's verdict, with every reason.
	got := b.eval("feeding a job the service finds in trouble", `(() => {
		window.heldPollJobs = pollJobs, pollJobs = async () => {};
		onMessage({type: "stats", job: "verdict-probe", ts: Date.now(), dropped: 0, stats: {name: "verdict-probe", kind: "heavy_hitters", rates: {}, latency: {},
			group: {mode: "auto", size: 64, overhead: 0.86, total_overhead: 0.5, low: 0.05, high: 0.1, groups: 90},
			health: {status: "warn", reasons: [
				{code: "coordination", text: "coordination 86% > 10%", why: "coordination 86% > 10% (over the last 5 s, the groups'), while the group grew from 2 to 64 batches"},
				{code: "unowned", text: "partition 1 has no owner", why: "no node holds the lease of 1"}]}}});
		const badge = document.querySelector('section.job[data-job="verdict-probe"] .health');
		const out = {text: badge.textContent, why: badge.title, note: document.querySelector('section.job[data-job="verdict-probe"] [data-f="group_note"]').textContent};
		removeJob("verdict-probe");
		pollJobs = window.heldPollJobs;
		return out;
	})()`)
	for k, want := range map[string]string{
		"text": "coordination 86% > 10%; partition 1 has no owner",
		"why":  "while the group grew from 2 to 64 batches\nno node holds the lease of 1",
		"note": "while the group grew from 2 to 64 batches",
	} {
		if !strings.Contains(fmt.Sprint(got[k]), want) {
			t.Errorf("the verdict's %s is %q, want it to say %q", k, got[k], want)
		}
	}

	// The browser's clock a minute ahead of the service's: stats that keep
	// coming are not late.
	late := b.eval("judging the badges with the browser's clock a minute ahead", `(() => {
		const realNow = Date.now;
		Date.now = () => realNow() + 60000;
		try {
			for (const j of jobs.values()) j.health();
			const late = [...document.querySelectorAll("#joblist li .health")].map(e => e.textContent).filter(t => /stats late|no stats/.test(t));
			return {late, n: late.length};
		} finally { Date.now = realNow; }
	})()`)
	if n, _ := late["n"].(float64); n > 0 {
		t.Errorf("with the browser's clock a minute ahead, badges say %v", late["late"])
	}

	// A job put now: its chart starts at its first point.
	if _, err := clientOf(t, url).PutJob(t.Context(), client.JobSpec{Name: "fresh", Kind: "distinct", Input: demoStream,
		Params: map[string]any{"field": "key"}}); err != nil {
		t.Fatal(err)
	}
	b.waitFor("the new job's rate chart has points", `(() => { const e = document.querySelector('section.job[data-job="fresh"] [data-chart="rate"]'); return e && e.uplot && Number(e.dataset.points) >= 3; })()`, nil, 30*time.Second)
	axis := b.eval("reading the new job's time axis", `(() => {
		const u = document.querySelector('section.job[data-job="fresh"] [data-chart="rate"]').uplot;
		return {min: u.scales.x.min, max: u.scales.x.max, first: u.data[0][0], last: u.data[0][u.data[0].length - 1], points: u.data[0].length};
	})()`)
	first, _ := axis["first"].(float64)
	lo, _ := axis["min"].(float64)
	hi, _ := axis["max"].(float64)
	last, _ := axis["last"].(float64)
	if first-lo > 1 || hi-last > 11 {
		b.fatalf("a new job's time axis runs %.0f s before its first point and %.0f s after its last (%v): want it to start at the first", first-lo, hi-last, axis)
	}
	b.checkConsole()
}
