package kindtest_test

import (
	"context"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The dashboard has no panel for kind count: it shows the job's status
// section (the fields the kind adds to the status) as a table.
func TestDashboardShowsTheSectionOfAnUnknownKind(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("no chromium on PATH")
	}
	url, do := serve(t)
	if code, body := do("PUT", "/v1/jobs/c", `{"kind":"count","input":"s"}`); code != http.StatusCreated {
		t.Fatalf("PUT: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/streams/s/events", "{\"key\":\"a\"}\n{\"key\":\"b\"}\n{\"key\":\"c\"}\n"); code != http.StatusAccepted {
		t.Fatalf("ingest: %d %s", code, body)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(chromium), chromedp.Headless,
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()), chromedp.Flag("disable-dev-shm-usage", true))
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(actx)
	defer cancelTab()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(url+"/")); err != nil {
		t.Fatal(err)
	}
	const section = `(() => { const b = document.querySelector('[data-job="c"] [data-block="section"]');
		return !!b && !b.hidden && b.innerText.includes("count_keys\t3") && b.querySelector("h3").textContent === "count"; })()`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](section, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-job="c"]')?.innerText ?? "no job"`))
		t.Fatalf("the section of kind count never showed count_keys 3: %v\n%s", err, text)
	}
}
