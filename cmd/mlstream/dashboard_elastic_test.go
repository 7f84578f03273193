package main

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The dashboard shows a rescaled job's partitions, its rescales and its
// hottest keys, from the real service.
func TestDashboardShowsRescales(t *testing.T) {
	b := newBrowser(t)
	cfg := writeConfig(t, `{"jobs":[{"name":"top","kind":"heavy_hitters","input":"clicks","partitions":2,"params":{"field":"item"}}]}`)
	srv := start(t, "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data", "")
	url := srv.url()
	var body []byte
	for i := range 2000 {
		key := "hot"
		if i%2 == 1 {
			key = fmt.Sprintf("k%d", i)
		}
		body = fmt.Appendf(body, "{\"key\":%q,\"item\":\"i%d\"}\n", key, i%50)
	}
	postNDJSON(t, url, "clicks", body)
	b.do("loading the dashboard", chromedp.Navigate(url+"/"))
	b.waitFor("the feed connects", `s.conn === "live"`, nil, 15*time.Second)
	req, _ := http.NewRequest("PATCH", url+"/v1/jobs/top", bytes.NewReader([]byte(`{"partitions":4}`)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PATCH: %v %v", resp, err)
	}
	resp.Body.Close()
	b.waitFor("the elastic panel shows the rescale", `(() => {
		const j = document.querySelector('section.job[data-job="top"]');
		const e = j && j.querySelector('[data-block="elastic"]');
		if (!e || e.hidden) return false;
		const f = k => e.querySelector('[data-f="' + k + '"]').textContent;
		const rows = [...e.querySelectorAll("table.rescales tbody tr")].map(r => r.textContent);
		return f("el_parts") === "4" && f("el_rescales") === "1" && rows.length === 1 && rows[0].includes("2 → 4") && rows[0].includes("api")
			&& f("el_hot").includes("hot ≈"); })()`, nil, 15*time.Second)
	b.checkConsole()
}
