package main

// Browser tests of the dashboard: Debian's chromium, headless, driven by
// chromedp, against the real binary running `mlstream demo`.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/internal/testaddr"
)

// chromiumPath finds a Chromium binary. Without one the test is skipped,
// except in CI (CI set), where .ci/run installs it and its absence fails.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "" {
		t.Skip("no chromium binary on PATH (CI unset): install Debian's chromium to run the dashboard tests")
	}
	t.Fatal("no chromium binary on PATH; .ci/run installs Debian's chromium")
	return ""
}

// browser is one headless Chromium tab and everything its console said.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu      sync.Mutex
	console []chromedp.ConsoleMessage
	// outages are the intervals in which the server was down on purpose:
	// the browser's network errors (failed WebSocket connections) are
	// expected there, and nowhere else.
	outages [][2]time.Time
	saved   bool // the failure report is written
	// shotsDir keeps the screenshots of the checks (shotsDir()).
	shotsDir string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx}
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	// The first Run starts the browser; it must not carry a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Time.IsZero() {
				m.Time = time.Now()
			}
			b.mu.Lock()
			b.console = append(b.console, m)
			b.mu.Unlock()
		}
	}()
	// A failure the test did not report through fatalf: the page as it is
	// then, before the browser stops (but after the servers do).
	t.Cleanup(func() {
		if t.Failed() {
			b.saveReport()
		}
	})
	return b
}

// fatalf fails the test and saves the failure report while the page still
// shows the failure.
func (b *browser) fatalf(format string, args ...any) {
	b.t.Helper()
	b.t.Errorf(format, args...)
	b.saveReport()
	b.t.FailNow()
}

// saveReport keeps a screenshot and the console log of a failed test, once,
// and prints their paths. t.TempDir is removed even after a failure, so
// they go to the test's artifact directory with -artifacts, else to a
// directory under os.TempDir that stays.
func (b *browser) saveReport() {
	t := b.t
	if b.saved {
		return
	}
	b.saved = true
	var dir string
	if f := flag.Lookup("test.artifacts"); f != nil && f.Value.String() == "true" {
		dir = t.ArtifactDir()
	} else if d, err := os.MkdirTemp("", "mlstream-dashboard-"); err == nil {
		dir = d
	} else {
		t.Logf("no directory for the failure report: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	shot := filepath.Join(dir, "screenshot.png")
	if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err != nil {
		t.Logf("screenshot failed: %v", err)
	} else if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Logf("saving the screenshot: %v", err)
	} else {
		t.Logf("screenshot of the page: %s", shot)
	}
	log := filepath.Join(dir, "console.log")
	if err := os.WriteFile(log, []byte(b.consoleLog()), 0o644); err != nil {
		t.Logf("saving the console log: %v", err)
	} else {
		t.Logf("console log of the page: %s", log)
	}
}

func (b *browser) consoleLog() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var s strings.Builder
	for _, m := range b.console {
		fmt.Fprintf(&s, "%s %s", m.Time.Format("15:04:05.000"), m)
		if m.Source != "" {
			fmt.Fprintf(&s, " (source %s)", m.Source)
		}
		if m.URL != "" {
			fmt.Fprintf(&s, " at %s:%d", m.URL, m.Line)
		}
		s.WriteString("\n")
	}
	return s.String()
}

// checkConsole fails the test on any exception or console error, and on
// any error of the browser itself outside the outages.
func (b *browser) checkConsole() {
	b.t.Helper()
	b.mu.Lock()
	msgs := b.console
	outages := b.outages
	b.mu.Unlock()
	failed := false
	for _, m := range msgs {
		bad := m.IsException() || m.Type == chromedp.ConsoleError
		if bad && m.Source != "" {
			for _, o := range outages {
				if !m.Time.Before(o[0]) && !m.Time.After(o[1]) {
					bad = false
				}
			}
		}
		if bad {
			b.t.Errorf("console at %s: %s (source %q, %s:%d); outages %v", m.Time.Format("15:04:05.000"), m, m.Source, m.URL, m.Line, outages)
			failed = true
		}
	}
	if failed {
		b.saveReport()
		b.t.FailNow()
	}
}

// pageState reads what the tests look at, by the data attributes the page
// keeps for them.
const pageState = `() => {
  const job = name => document.querySelector('section.job[data-job="' + name + '"]');
  const f = (name, field) => { const e = job(name) && job(name).querySelector('[data-f="' + field + '"]'); return e ? e.textContent.trim() : ""; };
  const points = (name, chart) => { const e = job(name) && job(name).querySelector('[data-chart="' + chart + '"]'); return e ? Number(e.dataset.points || 0) : 0; };
  const rows = (name, sel) => job(name) ? job(name).querySelectorAll(sel + " tbody tr").length : 0;
  const banner = document.getElementById("banner");
  window.num = t => Number(String(t).replace(/,/g, ""));
  return {
    created: job("clicks") ? job("clicks").dataset.created : "",
    conn: document.getElementById("conn").dataset.state,
    jobs: [...document.querySelectorAll("#joblist li")].map(li => li.dataset.job + ":" + li.dataset.kind),
    blocks: Object.fromEntries([...document.querySelectorAll("section.job")].map(e => [e.dataset.job, [...e.querySelectorAll("[data-block]")].filter(b => !b.hidden).map(b => b.dataset.block).sort().join(",")])),
    health: Object.fromEntries([...document.querySelectorAll("#joblist li")].map(li => [li.dataset.job, li.dataset.health])),
    processed: f("clicks", "processed"), version: f("clicks", "version"), rate: f("clicks", "rate"),
    acc: points("clicks", "acc"), loss: points("clicks", "loss"), ratePoints: points("clicks", "rate"),
    backupPoints: points("clicks", "backups"), ftBackups: f("clicks", "ft_backups"),
    predictions: rows("clicks", '[data-ticker="prediction"]'),
    topk: rows("top-features", "table.topk"), distinct: f("users", "distinct"), distinctPoints: points("users", "distinct"),
    group: Object.fromEntries([...document.querySelectorAll("section.job")].map(e => [e.dataset.job,
      [e.querySelector('[data-f="group_size"]'), e.querySelector('[data-f="group_mode"]')].map(x => x ? x.textContent.trim() : "").join(" ")])),
    groupPoints: points("clicks", "group"), consistency: f("clicks", "consistency"),
    recoveries: job("clicks") ? [...job("clicks").querySelectorAll("ol.recoveries li[data-at]")].map(li => ({...li.dataset})) : [],
    banner: banner.hidden ? "" : banner.textContent.trim(),
    auth: (f => f.hidden ? "" : f.querySelector(".msg").textContent + (f.querySelector(".forget").hidden ? "" : " [forget]"))(document.getElementById("auth")),
    overflow: document.documentElement.scrollWidth - window.innerWidth,
  };
}`

// waitFor polls the page until cond, a JavaScript expression over s (the
// page state now) and s0 (a state read earlier), is true.
func (b *browser) waitFor(what, cond string, s0 any, timeout time.Duration) {
	b.t.Helper()
	init, err := json.Marshal(s0)
	if err != nil {
		b.t.Fatal(err)
	}
	expr := fmt.Sprintf(`((s0) => { const s = (%s)(); return %s; })(%s)`, pageState, cond, init)
	ctx, cancel := context.WithTimeout(b.ctx, timeout+5*time.Second)
	defer cancel()
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		b.fatalf("%s: %v\npage state: %s", what, err, b.stateJSON())
	}
}

func (b *browser) state() map[string]any {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]any]("("+pageState+")()"))
	if err != nil {
		b.fatalf("reading the page: %v", err)
	}
	return s
}

func (b *browser) stateJSON() string {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte]("("+pageState+")()"))
	if err != nil {
		return "unreadable: " + err.Error()
	}
	return string(s)
}

// eval runs a JavaScript expression and returns its value, an object.
func (b *browser) eval(what, expr string) map[string]any {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]any](expr))
	if err != nil {
		b.fatalf("%s: %v", what, err)
	}
	return v
}

func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.fatalf("%s: %v", what, err)
	}
}

// The dashboard of a running demo: it loads without console errors, lists
// the jobs the API lists, its counters and charts move, it fits a laptop
// and a phone, and after a kill -9 and a restart it reconnects by itself
// and shows the recovery.
func TestDashboardInBrowser(t *testing.T) {
	b := newBrowser(t)
	addr, data := testaddr.Free(t), t.TempDir()
	args := []string{"demo", "--addr", addr, "--data", data, "--rate", "2000"}
	srv := start(t, args...)
	url := srv.url()

	b.do("loading the dashboard", chromedp.Navigate(url+"/"))
	b.waitFor("the feed connects", `s.conn === "live"`, nil, 15*time.Second)
	jobs := b.checkJobList(url)
	b.checkPanelsFill(jobs)
	b.checkTopFeatures(url)
	b.checkLayouts()
	b.checkConsole()
	b.checkRestartShown(srv, args)
	b.checkJoinPanel()
	b.checkCoordinationPanels()
	b.shotsDir = shotsDir(t)
	b.checkBadgesTellTheTruth()
	b.checkHistoryOnOpen(srv.url())
	b.checkCharts(b.shotsDir)
	b.screenshots(b.shotsDir)
	b.checkConsole()
	if testing.Verbose() {
		t.Logf("console of the page:\n%s", b.consoleLog())
	}
}

// checkJobList checks that the job list equals GET /v1/jobs (names, kinds
// and order) and that each job shows its kind's panel and the
// fault-tolerance panel; it returns the API's list.
func (b *browser) checkJobList(url string) []client.JobStatus {
	t := b.t
	t.Helper()
	jobs, err := clientOf(t, url).Jobs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, j := range jobs {
		want = append(want, j.Name+":"+j.Kind)
	}
	if len(want) < 3 {
		t.Fatalf("the demo runs %v, want at least 3 jobs", want)
	}
	b.waitFor("the job list equals GET /v1/jobs", `JSON.stringify(s.jobs) === JSON.stringify(s0)`, want, 10*time.Second)
	panels := map[string]string{}
	for _, j := range jobs {
		panels[j.Name] = map[string]string{"logreg": "logreg", "heavy_hitters": "topk", "distinct": "distinct", "join": "join"}[j.Kind]
	}
	b.waitFor("each job shows its panels", `Object.entries(s0).every(([job, p]) => ["ft", p].every(x => (s.blocks[job] || "").split(",").includes(x)))`, panels, 10*time.Second)
	return jobs
}

// checkPanelsFill checks that counters and charts change and every panel
// fills: every job shows its group size and mode, the logreg job its
// consistency model as the API reports it.
func (b *browser) checkPanelsFill(jobs []client.JobStatus) {
	t := b.t
	t.Helper()
	var names []string
	consistency := ""
	for _, j := range jobs {
		names = append(names, j.Name)
		var c struct{ Consistency *struct{ Model string } }
		if err := json.Unmarshal(j.Raw, &c); err != nil {
			t.Fatal(err)
		}
		if j.Name == demoJob && c.Consistency != nil {
			consistency = c.Consistency.Model
		}
	}
	if consistency == "" {
		t.Fatalf("GET /v1/jobs: no consistency for the logreg job %s", demoJob)
	}
	s0 := b.state()
	s0["jobNames"], s0["wantConsistency"] = names, consistency
	b.waitFor("counters and charts change", `s.processed !== s0.processed && s.version !== s0.version && s.version !== "–"
		&& s.acc >= s0.acc + 3 && s.loss >= s0.loss + 3 && s.ratePoints >= s0.ratePoints + 3 && s.backupPoints >= s0.backupPoints + 3
		&& s.distinctPoints >= s0.distinctPoints + 3 && s.topk > 0 && s.distinct !== "–" && s.predictions > 0
		&& s.ftBackups !== "–" && Object.values(s.health).every(h => h === "ok" || h === "warn")
		&& s0.jobNames.every(j => /^[0-9.,]+ \((auto|fixed)\)$/.test(s.group[j] || "") && num(s.group[j].split(" ")[0]) >= 1)
		&& s.groupPoints >= s0.groupPoints + 3 && s.consistency === s0.wantConsistency`, s0, 30*time.Second)
}

// checkTopFeatures checks that the model panel lists the strongest
// weights by feature name, signed, with names that the API's
// model?top= gives for the job's strongest weights.
func (b *browser) checkTopFeatures(url string) {
	b.t.Helper()
	const rows = `[...document.querySelectorAll('section.job[data-job="` + demoJob + `"] [data-f="top_features"] tbody tr')]`
	b.waitFor("the model panel lists top features by name", `(() => { const r = `+rows+`;
		return r.length > 0 && r.every(x => x.cells[0].textContent.trim() !== "" && /^[+−][0-9]/.test(x.cells[1].textContent.trim())); })()`, nil, 20*time.Second)
	// The model learns on meanwhile, and names are sampled: early on some
	// slots have none yet. Poll until most names shown are among the
	// API's strongest 100.
	deadline := time.Now().Add(30 * time.Second)
	for {
		names, known := b.topNames(rows, url)
		found := 0
		for _, n := range names {
			if known[n] {
				found++
			}
		}
		if len(names) >= 3 && found*2 >= len(names) {
			return
		}
		if time.Now().After(deadline) {
			b.fatalf("the panel shows the names %v; the API's top 100: %v", names, known)
		}
		time.Sleep(500 * time.Millisecond) // between polls of a condition with a deadline
	}
}

// topNames returns the first name of each row of the top features that
// has one, and the names of GET .../model?top=100.
func (b *browser) topNames(rows, url string) (shown []string, known map[string]bool) {
	v := b.eval("reading the top features", `({names: `+rows+`.map(x => x.cells[0].textContent).filter(t => !t.startsWith("slot ")).map(t => t.split(",")[0].replace(/ \(\d[\d,]*\)$/, "").trim())})`)
	for _, n := range v["names"].([]any) {
		shown = append(shown, n.(string))
	}
	var top struct {
		Top []struct {
			Names []struct{ Name string }
		}
	}
	getJSON(b.t, url+"/v1/jobs/"+demoJob+"/model?top=100", &top)
	known = map[string]bool{}
	for _, w := range top.Top {
		for _, n := range w.Names {
			known[n.Name] = true
		}
	}
	return shown, known
}

// checkLayouts checks a phone and a laptop: nothing wider than the screen;
// at 1280 px the model's two charts sit side by side.
func (b *browser) checkLayouts() {
	b.t.Helper()
	b.do("phone width", chromedp.EmulateViewport(400, 860, chromedp.EmulateMobile))
	b.waitFor("the page fits 400 px", `s.overflow <= 0`, nil, 5*time.Second)
	b.do("laptop width", chromedp.EmulateViewport(1280, 900))
	b.waitFor("the page fits 1280 px with charts side by side", `s.overflow <= 0 && (() => {
		const [a, l] = ["acc", "loss"].map(c => document.querySelector('section.job[data-job="clicks"] [data-chart="' + c + '"]').getBoundingClientRect());
		return a.top === l.top && a.width > 400 && l.left > a.right; })()`, nil, 5*time.Second)
}

// checkRestartShown kills the service with -9 and restarts it on the same
// data and address: the page notices, reconnects by itself and shows the
// recovery the API reports.
func (b *browser) checkRestartShown(srv *proc, args []string) {
	t := b.t
	t.Helper()
	url := srv.url()
	created := b.state()["created"] // of the job before the crash
	killed := time.Now()
	kill9(t, srv)
	b.waitFor("the page notices the service is gone", `s.conn === "reconnecting"`, nil, 10*time.Second)
	srv = start(t, args...)
	if u := srv.url(); u != url {
		b.fatalf("restarted at %s, want %s", u, url)
	}
	var job struct {
		FT struct {
			Recovery *struct {
				At       string
				Failures int
				Lost     int64
				Within   bool
				Clean    bool
			}
		}
	}
	getJob(t, url, demoJob, &job)
	rec := job.FT.Recovery
	if rec == nil || rec.Clean || rec.Failures != 1 {
		b.fatalf("recovery after kill -9: %+v", rec)
	}
	b.waitFor("the page reconnects and shows the recovery", `s.conn === "live" && /Reconnected at/.test(s.banner)
		&& s.banner.includes("The service restarted") && s.banner.includes("clicks")
		&& s.recoveries.some(r => r.at === s0.at && r.failures === "1" && r.lost === String(s0.lost) && r.within === String(s0.within) && r.clean === "false")`,
		map[string]any{"at": rec.At, "lost": rec.Lost, "within": rec.Within}, 20*time.Second)
	b.mu.Lock()
	// Chrome stamps a failed request with the time it began, which can be
	// just before the kill: a little slack.
	b.outages = append(b.outages, [2]time.Time{killed.Add(-2 * time.Second), time.Now().Add(time.Second)})
	b.mu.Unlock()

	// Live again: the restarted service's counters (they start from 0)
	// climb on the page, and its charts go on.
	b.waitFor("the restarted service's stats arrive", `s.created !== s0`, created, 10*time.Second)
	s1 := b.state()
	b.waitFor("counters climb after the restart", `num(s.processed) > num(s0.processed) && s.acc >= s0.acc + 2
		&& Object.values(s.health).every(h => h === "ok" || h === "warn")`, s1, 30*time.Second)
}

// checkJoinPanel checks the panel of a join job.
func (b *browser) checkJoinPanel() {
	b.t.Helper()
	// A join job's panel, from statuses shaped as join jobs report them,
	// whole and with every field missing. No ticker samples them: they
	// are not the service's jobs, so the page's poll of /v1/jobs (every
	// 5 s) removes them again: each check feeds them first.
	b.do("defining the join stats", chromedp.Evaluate[chromedp.Void](`window.feedJoinProbes = () => [
		{name: "join-probe", kind: "join", streams: ["impressions", "clicks"], rates: {}, latency: {}, join: {
			seen: 5000, sampled: 2500, matches: 1234, late: 1, expired: 700, evicted: 3, lost: 0, recoveries: 0,
			match_rate: 56.5, state_tuples: 800, state_bytes: 65536, max_state_bytes: 1048576,
			estimate: {window_start: 1000, window_end: 31000, count: {estimate: 10, low: 8, high: 12}, sum: {estimate: 5.5, low: 5, high: 6},
				avg: {estimate: 0.55, low: 0.5, high: 0.6}, sample: 0.5, confidence: 0.95, exact: false, complete: true},
			recent: [{key: "ad-1", left_ts: 1000, right_ts: 1500, left_value: 1, right_value: 2}]}},
		{name: "join-sparse", kind: "join", join: {}},
	].forEach(st => { onMessage({type: "stats", job: st.name, ts: Date.now(), dropped: 0, stats: st}); jobs.get(st.name).sampleBroken = {match: true}; })`))
	b.waitFor("the join panel shows", `(() => {
		feedJoinProbes();
		const j = document.querySelector('section.job[data-job="join-probe"]'), sp = document.querySelector('section.job[data-job="join-sparse"]');
		if (!j || !sp) return false;
		const blocks = e => [...e.querySelectorAll("[data-block]")].filter(b => !b.hidden).map(b => b.dataset.block);
		const f = k => j.querySelector('[data-f="' + k + '"]').textContent;
		return blocks(j).includes("join") && blocks(sp).includes("join") && f("matches") === "1,234" && f("state_bytes") === "64.0 KiB / 1.0 MiB" && f("evictions") === "3"
			&& f("join_note").includes("95% intervals")
			&& j.querySelectorAll("table.estimates tbody tr").length === 3 && j.querySelectorAll('[data-ticker="match"] tbody tr').length === 1
			&& sp.querySelector('[data-f="matches"]').textContent === "–"; })()`, nil, 5*time.Second)
	b.do("removing the join probes", chromedp.Evaluate[chromedp.Void](`removeJob("join-probe"), removeJob("join-sparse")`))
}

// checkCoordinationPanels checks the coordination, shedding and
// held-back panels.
func (b *browser) checkCoordinationPanels() {
	b.t.Helper()
	// Coordination, shedding and held-back senders, from statuses shaped as
	// the service reports them (the demo sheds nothing, holds no one back
	// and runs async), whole and with fields missing. Fed, read and removed
	// in one evaluation: no poll of /v1/jobs removes them halfway, no
	// ticker samples them.
	probe := b.eval("feeding the page coordination stats", `(() => {
		const group = {mode: "auto", size: 8, overhead: 0.25, low: 0.05, high: 0.1, groups: 40, total_overhead: 0.02};
		const part = i => ({partition: i, queue_depth: 10, processed: 100, drain_rate: 1500.5, held_back: i, group: {...group, size: 4 * (i + 1)}});
		const probes = [
			{name: "lr-probe", kind: "logreg", rates: {}, latency: {}, model: {version: 3}, metrics: {},
				labels: {ttl_ms: 3600000, pending_max_bytes: 8388608, pending: 5, pending_bytes: 2048, held: 12, joined: 6, unknown: 2, expired: 1, evicted: 0, duplicates: 0},
				group, partitions: [part(0), part(1)], held_back: 1, held_back_total: 12, held_back_ms: 2500,
				shed: {max_delay: "50ms", drops: "training events (labelled); predictions are always kept", shed: 412, fraction: 0.412},
				consistency: {model: "ssp", staleness: 3, min_round: 12, max_round: 14, waits: 5, waited_ms: 40}, ft: {}},
			{name: "hh-probe", kind: "heavy_hitters", group: {mode: "fixed", size: 16, overhead: 0.07, low: 0.05, high: 0.1},
				shed: {max_delay: "50ms", drops: "events", shed: 7, fraction: 0.5, extra_weight: 9},
				topk: {items: [{key: "a", estimate: 10, lower: 5, upper: 19}], total: 10, shed: 7, extra_weight: 9}},
			{name: "lr-sparse", kind: "logreg", model: {}, group: {}, partitions: [{}], shed: {}, consistency: {}, ft: {}},
			{name: "bare"},
		];
		for (const st of probes) onMessage({type: "stats", job: st.name, ts: Date.now(), dropped: 0, stats: st});
		const sec = n => document.querySelector('section.job[data-job="' + n + '"]');
		const f = (n, k) => sec(n).querySelector('[data-f="' + k + '"]').textContent.trim();
		const out = {
			size: f("lr-probe", "group_size") + " " + f("lr-probe", "group_mode"), overhead: f("lr-probe", "group_overhead"),
			overheadState: sec("lr-probe").querySelector('[data-f="group_overhead"]').dataset.state, total: f("lr-probe", "group_total"),
			bounds: f("lr-probe", "group_bounds"), parts: sec("lr-probe").querySelectorAll("table.groups tbody tr").length,
			shed: f("lr-probe", "shed") + " " + f("lr-probe", "shed_frac"), shedNote: f("lr-probe", "shed_note"),
			heldBack: f("lr-probe", "held_back") + "; " + f("lr-probe", "held_back_total"),
			consistency: f("lr-probe", "consistency"), consistencyNote: f("lr-probe", "consistency_note"),
			labels: f("lr-probe", "labels_pending") + " | " + f("lr-probe", "labels_note"),
			sparseLabels: sec("lr-sparse").querySelector('[data-card="labels"]') === null,
			hhSize: f("hh-probe", "group_size") + " " + f("hh-probe", "group_mode"), hhState: sec("hh-probe").querySelector('[data-f="group_overhead"]').dataset.state,
			hhShed: f("hh-probe", "shed_note"), topkNote: f("hh-probe", "topk_note"),
			sparse: ["group_size", "shed", "consistency", "held_back"].map(k => f("lr-sparse", k)).join(" "),
			bare: ["group_size", "shed", "held_back"].map(k => f("bare", k)).join(" "),
		};
		for (const st of probes) removeJob(st.name);
		return out;
	})()`)
	for k, want := range map[string]string{
		"size": "8 (auto)", "overhead": "25%", "overheadState": "high", "total": "2.0%", "bounds": "[5.0%, 10%]", "parts": "2",
		"shed": "412 41%", "heldBack": "1; 12 times, 2.5 s in all", "consistency": "ssp ≤ 3",
		"hhSize": "16 (fixed)", "hhState": "in", "sparse": "– 0 – –", "bare": "– 0 –",
		"labels": "5 held | delayed labels: 6 of 12 joined; 2 unknown, 1 expired; 2.0 KiB of 8.0 MiB", "sparseLabels": "true",
	} {
		if got := fmt.Sprint(probe[k]); got != want {
			b.fatalf("coordination probe: %s = %q, want %q (all: %v)", k, got, want, probe)
		}
	}
	for k, want := range map[string]string{
		"shedNote": "predictions are always kept", "consistencyNote": "rounds 12 (slowest) to 14 (fastest); waited 5 times, 40 ms",
		"hhShed": "9 extra weight", "topkNote": "the bounds are widened",
	} {
		if got := fmt.Sprint(probe[k]); !strings.Contains(got, want) {
			b.fatalf("coordination probe: %s = %q, want it to say %q", k, got, want)
		}
	}
}

// A service with tokens: the page says the job list needs a token (not
// "No jobs yet") and asks for a read token, refuses an admin token (it
// does not keep one) and a token without the read scope, offering to
// forget the latter, then shows the data with a read token, which it keeps
// for the tab (sessionStorage, not localStorage) across a reload.
func TestDashboardAsksForToken(t *testing.T) {
	const readTok, ingestTok, adminTok = "read-token-for-the-page-0123", "ingest-token-for-the-page-0123", "admin-token-for-the-page-0123"
	b := newBrowser(t)
	srv := startEnv(t, []string{"MLSTREAM_TOKENS=read:" + readTok + ",ingest:" + ingestTok + ",admin:" + adminTok},
		"demo", "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--rate", "2000")
	url := srv.url()
	// Until the read token is in, the page meets 401s and 403s on purpose.
	refusals := time.Now()

	b.do("loading the dashboard", chromedp.Navigate(url+"/"))
	b.waitFor("the page asks for a token", `s.conn === "auth" && s.auth.includes("needs a token") && !s.auth.includes("[forget]")`, nil, 15*time.Second)
	if v := b.eval("reading the job list", `(() => { const e = document.querySelector("#overview .empty"); return {shown: !e.hidden && !!e.offsetParent, text: e.textContent}; })()`); v["shown"] != true ||
		strings.Contains(fmt.Sprint(v["text"]), "No jobs") || !strings.Contains(fmt.Sprint(v["text"]), "token with the read scope") {
		b.fatalf("after a 401 the job list says %v, want that it needs a token", v)
	}
	// The Content-Security-Policy is in force: an injected inline script
	// does not run (the browser says so on the console, inside the window
	// of expected errors).
	if v := b.eval("injecting an inline script", `(() => {
		const sc = document.createElement("script");
		sc.textContent = "window.injected = true";
		document.body.appendChild(sc);
		return {ran: window.injected === true};
	})()`); v["ran"] != false {
		b.fatalf("an inline script ran despite the CSP: %v", v)
	}
	enter := func(tok string) {
		b.t.Helper()
		b.do("entering a token", chromedp.SendKeys(chromedp.CSS("#auth input"), tok), chromedp.Click(chromedp.CSS(`#auth button[type="submit"]`)))
	}
	stored := func() map[string]any {
		return b.eval("reading the stores", `({session: sessionStorage.getItem("mlstream.token"), local: localStorage.getItem("mlstream.token")})`)
	}
	enter(adminTok)
	b.waitFor("an admin token is refused", `s.conn === "auth" && s.auth.includes("admin token")`, nil, 15*time.Second)
	if st := stored(); st["session"] != nil || st["local"] != nil {
		b.fatalf("the page kept the admin token: %v", st)
	}
	enter(ingestTok)
	b.waitFor("a token without read is refused", `s.conn === "auth" && s.auth.includes("may not read") && s.auth.includes("[forget]")`, nil, 15*time.Second)
	b.do("forgetting it", chromedp.Click(chromedp.CSS("#auth .forget")))
	b.waitFor("the page asks again", `s.conn === "auth" && s.auth.includes("needs a token") && !s.auth.includes("[forget]")`, nil, 15*time.Second)
	enter(readTok)
	b.mu.Lock()
	b.outages = append(b.outages, [2]time.Time{refusals, time.Now().Add(time.Second)})
	b.mu.Unlock()
	b.waitFor("the page shows the data", `s.conn === "live" && s.auth === "" && s.jobs.includes("clicks:logreg") && s.processed !== "–" && s.acc >= 2`, nil, 30*time.Second)

	if st := stored(); st["session"] != readTok || st["local"] != nil {
		b.fatalf("the read token is kept as %v, want in sessionStorage only", st)
	}
	// The token stays in the tab: a reload goes live without asking.
	b.do("reloading", chromedp.Reload())
	b.waitFor("live again without asking", `s.conn === "live" && s.auth === "" && s.processed !== "–"`, nil, 30*time.Second)
	b.checkConsole()
	if testing.Verbose() {
		t.Logf("console of the page:\n%s", b.consoleLog())
	}
}

// screenshots saves the page at laptop and phone width, a screenful a
// file, for a look by eye (MLSTREAM_DASHBOARD_SHOTS=dir).
func (b *browser) screenshots(dir string) {
	for _, w := range []int64{1280, 400} {
		b.do("viewport", chromedp.EmulateViewport(w, 900))
		b.waitFor("layout settles", `s.overflow <= 0`, nil, 5*time.Second)
		for i := 0; ; i++ {
			ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
			more, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`window.scrollTo(0, %d * 800), window.scrollY + innerHeight < document.documentElement.scrollHeight`, i)))
			var png []byte
			if err == nil {
				png, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
			}
			cancel()
			if err != nil {
				b.t.Fatal(err)
			}
			p := filepath.Join(dir, fmt.Sprintf("dashboard-%d-%02d.png", w, i))
			if err := os.WriteFile(p, png, 0o644); err != nil {
				b.t.Fatal(err)
			}
			if !more {
				break
			}
		}
		b.t.Logf("screenshots: %s/dashboard-%d-*.png", dir, w)
	}
}

// shotsDir is where the screenshots go: $MLSTREAM_DASHBOARD_SHOTS, else
// test-artifacts/dashboard under the repository root in CI (CI set),
// kept as the run's artifacts, else a directory removed after the test.
func shotsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("MLSTREAM_DASHBOARD_SHOTS")
	switch {
	case dir != "":
	case os.Getenv("CI") != "":
		dir = filepath.Join("..", "..", "test-artifacts", "dashboard")
	default:
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// chartState checks every drawn chart of the page as a reader sees it:
// axes with titles, time ticks on a clock (never milliseconds), y ticks
// that do not repeat, axes wide enough for their labels, an x axis of
// minutes (not years), and a legend that shows the newest values while
// the cursor is off the chart. It returns the problems by chart.
const chartState = `(() => {
  const clock = /^\d\d:\d\d(:\d\d)?$/;
  const out = {}, names = [];
  for (const box of document.querySelectorAll("section.job [data-chart]")) {
    const u = box.uplot;
    if (!u || !box.offsetParent || !Number(box.dataset.points)) continue;
    const name = box.closest("section.job").dataset.job + "/" + box.dataset.chart;
    names.push(name);
    const bad = [];
    const xs = u.axes[0]._values || [];
    if (!xs.length || !xs.every(v => clock.test(v))) bad.push("time ticks " + JSON.stringify(xs));
    const span = u.scales.x.max - u.scales.x.min;
    if (!(span >= 9 && span <= 3600)) bad.push("time axis spans " + span + " s");
    if (u.scales.x.min < u.data[0][0] - 1) bad.push("time axis starts " + (u.data[0][0] - u.scales.x.min) + " s before the first point");
    u.ctx.font = "12px system-ui, sans-serif";
    u.axes.forEach((a, i) => {
      if (!a.label) bad.push("axis " + i + " has no title");
      const vals = (a._values || []).map(String);
      if (i > 0 && new Set(vals).size !== vals.length) bad.push("axis " + i + " repeats " + JSON.stringify(vals));
      const w = Math.max(0, ...vals.map(v => u.ctx.measureText(v).width));
      if (i > 0 && a._size < w) bad.push("axis " + i + " is " + a._size + " px wide, its labels " + w);
    });
    const legend = [...box.querySelectorAll(".u-legend .u-value")].map(e => e.textContent.trim());
    if (!clock.test(legend[0] || "") || legend.slice(1).every(v => v === "–" || v === "--")) bad.push("legend " + JSON.stringify(legend));
    if (u.width > box.clientWidth + 1) bad.push("chart " + u.width + " px in a box of " + box.clientWidth);
    if (bad.length) out[name] = bad;
  }
  return {bad: out, charts: names};
})()`

// checkCharts checks every chart (chartState), then keeps a screenshot of
// each, and of a chart with a single point, in dir.
func (b *browser) checkCharts(dir string) {
	t := b.t
	t.Helper()
	b.do("laptop width", chromedp.EmulateViewport(1280, 900))
	// Open every panel, so that every chart is drawn.
	b.do("opening the panels", chromedp.Evaluate[chromedp.Void](`document.querySelectorAll("details").forEach(d => d.open = true)`))
	var res map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for {
		res = b.eval("reading the charts", chartState)
		if bad, _ := res["bad"].(map[string]any); len(bad) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // the charts redraw every second; poll
	}
	charts, _ := res["charts"].([]any)
	if bad, _ := res["bad"].(map[string]any); len(bad) > 0 || len(charts) < 8 {
		b.fatalf("charts a reader cannot read: %v (charts drawn: %v)", bad, charts)
	}
	// The page holds still while it is photographed: stats that change
	// the height of a panel move the charts below it between the
	// measurement of a chart and its capture. The feed stays open.
	b.do("holding the page still", chromedp.Evaluate[chromedp.Void](`window.heldOnMessage = feed.onmessage, feed.onmessage = () => { lastMsgAt = Date.now(); }`))
	for _, c := range charts {
		job, chart, _ := strings.Cut(c.(string), "/")
		b.shot(dir, "chart-"+job+"-"+chart, fmt.Sprintf(`section.job[data-job=%q] [data-chart=%q]`, job, chart))
	}
	b.do("letting the page go on", chromedp.Evaluate[chromedp.Void](`feed.onmessage = window.heldOnMessage`))
	// One point: the time axis starts there and spans ten seconds, not the
	// years around it.
	// The job list's poll removes a job the service does not list: it is
	// held while the fed job is looked at (one poll may be on its way
	// already: shotFed feeds the job again should it be gone).
	b.do("holding the job list's polls", chromedp.Evaluate[chromedp.Void](`window.heldPollJobs = pollJobs, pollJobs = async () => {}`))
	feed := `jobs.has("one-point") || onMessage({type: "stats", job: "one-point", ts: Date.now(), dropped: 0, stats: {name: "one-point", kind: "heavy_hitters",
		rates: {processed_per_s: 1990, accepted_per_s: 1990}, queue_depth: 3, latency: {p50_ms: 0.5, p99_ms: 2}}}), jobs.get("one-point").el.scrollIntoView(), 0`
	b.do("feeding one point", chromedp.Evaluate[chromedp.Void](feed))
	one := b.eval("reading the one-point chart", `(() => {
		const u = document.querySelector('section.job[data-job="one-point"] [data-chart="rate"]').uplot;
		return {span: u.scales.x.max - u.scales.x.min, before: u.data[0][0] - u.scales.x.min, ticks: u.axes[0]._values, y: u.axes[1]._values};
	})()`)
	if span, _ := one["span"].(float64); span < 9 || span > 12 || one["before"] != 0.0 {
		b.fatalf("a chart of one point spans %v s: %v", one["span"], one)
	}
	b.shotFed(dir, "chart-one-point", feed, `section.job[data-job="one-point"] .charts`)
	b.do("removing the one-point job", chromedp.Evaluate[chromedp.Void](`removeJob("one-point"), pollJobs = window.heldPollJobs`))
	t.Logf("chart screenshots: %s/chart-*.png", dir)
}

// shotFed is shot of an element that feed (JavaScript) puts on the page
// and the page may remove again: it feeds and tries up to three times.
func (b *browser) shotFed(dir, name, feed, sel string) {
	b.t.Helper()
	var err error
	for range 3 {
		ctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
		var png []byte
		if _, err = chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](feed)); err == nil {
			png, err = chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
		}
		cancel()
		if err == nil {
			if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
				b.t.Fatal(err)
			}
			return
		}
	}
	b.fatalf("screenshot of %s: %v", sel, err)
}

// shot saves a screenshot of the element sel as dir/name.png.
func (b *browser) shot(dir, name, sel string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		b.fatalf("screenshot of %s: %v", sel, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// checkBadgesTellTheTruth feeds the page statuses of jobs in trouble the
// service reports as such, and checks that no badge says "ok" then: a
// group at max_group whose overhead stays far above its bound (the
// service's health says so; a status whose health says nothing is ok), a
// join that evicts 45% of its tuples; and that a job whose feed reopened
// a moment ago (on the server's clock) is not "no stats".
func (b *browser) checkBadgesTellTheTruth() {
	b.t.Helper()
	b.do("defining troubled jobs", chromedp.Evaluate[chromedp.Void](`window.feedTroubled = () => {
		const group = {mode: "auto", size: 1024, overhead: 0.48, total_overhead: 0.5, low: 0.05, high: 0.1, groups: 900};
		window.troubled = [
			{name: "coord-probe", kind: "heavy_hitters", spec: {sync: {max_group: 1024}}, rates: {}, latency: {}, group, health: {status: "warn", reasons: [{code: "coordination",
				text: "coordination 48% > 10%", why: "coordination 48% > 10% (the last group's) at max group 1024: the job's batches are tiny; raise sync.max_group or send bigger requests"}]}},
			{name: "grow-probe", kind: "heavy_hitters", spec: {sync: {max_group: 1024}}, rates: {}, latency: {}, group: {...group, size: 64}},
			{name: "evict-probe", kind: "join", rates: {}, latency: {}, partitions: [{}, {}, {}, {}], join: {
				seen: 10000, evicted: 4500, matches: 100, state_bytes: 430, max_state_bytes: 1000, match_rate: 3,
				estimate: {count: {estimate: 100, low: 100, high: 190}, sum: {estimate: 5, low: 5, high: 9.5}, sample: 1, confidence: 0.95, exact: false, complete: false}}},
		];
		for (const st of troubled) {
			onMessage({type: "stats", job: st.name, ts: Date.now(), dropped: 0, stats: st});
			jobs.get(st.name).sampleBroken = {match: true};
		}
	}`))
	got := b.eval("feeding troubled jobs", `(() => {
		feedTroubled();
		const sec = n => document.querySelector('section.job[data-job="' + n + '"]');
		const badge = n => sec(n).querySelector(".health").textContent + " | " + sec(n).querySelector(".health").title;
		const f = (n, k) => sec(n).querySelector('[data-f="' + k + '"]').textContent;
		// A job whose last stats are old, on a feed that reopened a second ago.
		// Both on the server's clock.
		const ev = jobs.get("evict-probe"), keep = [ev.statsAt, ev.polledAt, feedOpenedServer];
		ev.statsAt = serverClock - 60000;
		feedOpenedServer = serverClock - 1000;
		ev.health();
		const afterReconnect = badge("evict-probe");
		feedOpenedServer = serverClock - 60000;
		ev.polledAt = serverClock;
		ev.health();
		const feedLate = badge("evict-probe");
		[ev.statsAt, ev.polledAt, feedOpenedServer] = keep;
		ev.health();
		const out = {
			coord: badge("coord-probe"), coordNote: f("coord-probe", "group_note"), grow: badge("grow-probe"),
			evict: badge("evict-probe"), joinNote: f("evict-probe", "join_note"),
			high: [...sec("evict-probe").querySelectorAll("table.estimates tbody tr")].map(r => r.cells[3].textContent).join(","),
			stateNote: f("evict-probe", "state_note"), afterReconnect, feedLate,
		};
		return out;
	})()`)
	// A look at them: the poll of /v1/jobs removes jobs the service does
	// not have, so each attempt feeds them again.
	for _, job := range []string{"coord-probe", "evict-probe"} {
		b.shotFed(b.shotsDir, "badge-"+job, `feedTroubled(), jobs.get("`+job+`").el.scrollIntoView()`, fmt.Sprintf(`section.job[data-job=%q]`, job))
	}
	b.do("removing the troubled jobs", chromedp.Evaluate[chromedp.Void](`troubled.forEach(st => removeJob(st.name))`))
	for k, want := range map[string]string{
		"coord":          "coordination 48% > 10% | coordination 48% > 10% (the last group's) at max group 1024: the job's batches are tiny; raise sync.max_group or send bigger requests",
		"coordNote":      "raise sync.max_group",
		"grow":           "ok |",
		"evict":          "evicts 45% | 4,500 of 10,000 tuples seen were evicted",
		"joinNote":       "incomplete: 4,500 evicted for max_state (45% of the tuples seen)",
		"high":           "190 (with evicted),9.5 (with evicted)",
		"stateNote":      "split over 4 partitions",
		"afterReconnect": "evicts 45%",
		"feedLate":       "stats late | no stats message for 60 s of the service's time on the feed",
	} {
		if got := fmt.Sprint(got[k]); !strings.Contains(got, want) {
			b.fatalf("badges: %s = %q, want it to say %q (all: %v)", k, got, want, got)
		}
	}
	if note := fmt.Sprint(got["joinNote"]); strings.Contains(note, "exact") {
		b.fatalf("a join that evicts claims exact estimates: %q", note)
	}
}

// checkHistoryOnOpen opens the page anew once the service has a history
// of its jobs: the charts show the last seconds at once, not one point a
// second from now on. "At once" is judged by the points, not by a clock
// (a loaded machine may take seconds to reload the page): within
// historyWait the live feed alone adds at most a point a second, far
// fewer than the history holds.
func (b *browser) checkHistoryOnOpen(url string) {
	t := b.t
	t.Helper()
	const historyWait = 8 * time.Second
	const want = 20 // points of history: more than historyWait's live ones + 3
	var n int
	deadline := time.Now().Add(40 * time.Second)
	for {
		var h struct{ Points []map[string]any }
		getJSON(t, url+"/v1/jobs/"+demoJob+"/history", &h)
		if n = len(h.Points); n >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond) // one point a second; poll
	}
	if n < want {
		b.fatalf("the service's history of %s has %d points after 40 s", demoJob, n)
	}
	opened := time.Now()
	b.do("reopening the dashboard", chromedp.Reload())
	// Every chart of a job, not only the rates: the model's accuracy and
	// loss, its backups, the distinct count (another job).
	b.waitFor("the charts show the history at once", `s.conn === "live" && s.ratePoints >= s0 - 3 && s.groupPoints >= s0 - 3 &&
		s.acc >= s0 - 3 && s.loss >= s0 - 3 && s.backupPoints >= s0 - 3 && s.distinctPoints >= s0 - 3`, n, historyWait)
	t.Logf("history of %d points drawn %v after the reload", n, time.Since(opened).Round(time.Millisecond))
}

// getJSON GETs url and decodes its JSON body into v, insisting on 200.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
