package main

// Browser tests of the dashboard's Cluster panel: three real nodes, a
// heavy-hitters job, a kill -9, headless Chromium on node 1's dashboard.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/mlstream/mlstream/internal/testaddr"
)

// clusterPage is the Cluster panel as a reader sees it, read by the data
// attributes the page keeps (clusterPageJS).
type clusterPage struct {
	Hidden bool
	Mode   string // "cluster", "single", "off" or "" (not decided yet)
	Node   string
	Nodes  []struct {
		Name, Link, Seen string
		Self             bool
		// The node's own rates (events/s ingested there and processed by
		// its partitions, outputs/s forwarded), "" when it sent none.
		Ingested, Processed, Forwarded string
	}
	Cells     []struct{ Job, Partition, Node, State, Text string }
	Moves     []clusterMove
	Owns      map[string]string // job -> partitions this node owns, "0,3"
	PubRate   string
	Published string
	Conn      string
	Overflow  float64
}

// clusterMove is a row of the moves table.
type clusterMove struct {
	Job, Partition, From, To, Graceful, How, Source, Text string
}

const clusterPageJS = `(() => {
  const p = document.getElementById("cluster");
  if (!p) return {mode: "no panel"};
  const f = name => p.querySelector('[data-f="' + name + '"]').textContent.trim();
  return {
    hidden: p.hidden, mode: p.dataset.mode || "", node: p.dataset.node || "",
    nodes: [...p.querySelectorAll("table.nodes tbody tr")].map(tr => ({name: tr.dataset.node, self: tr.dataset.self === "true",
      link: tr.querySelector("a") ? tr.querySelector("a").href : "", seen: tr.cells[2].textContent,
      ingested: tr.dataset.ingested, processed: tr.dataset.processed, forwarded: tr.dataset.forwarded})),
    cells: [...p.querySelectorAll(".cjob .pcell")].map(c => ({job: c.closest(".cjob").dataset.job, partition: c.dataset.partition,
      node: c.dataset.node, state: c.dataset.state, text: c.textContent})),
    moves: [...p.querySelectorAll("table.moves tbody tr")].map(tr => ({...tr.dataset, text: tr.textContent})),
    owns: Object.fromEntries([...p.querySelectorAll(".cjob")].map(b => [b.dataset.job, b.querySelector("p.owns").dataset.own])),
    pubRate: f("c_pub_rate"), published: f("c_published"),
    conn: document.getElementById("conn").dataset.state,
    overflow: document.documentElement.scrollWidth - window.innerWidth,
  };
})()`

func (b *browser) clusterPage() (clusterPage, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[clusterPage](clusterPageJS))
}

// waitCluster polls the panel until cond holds, for at most within.
func (b *browser) waitCluster(what string, within time.Duration, cond func(clusterPage) bool) clusterPage {
	b.t.Helper()
	deadline := time.Now().Add(within)
	for {
		s, err := b.clusterPage()
		if err == nil && cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			b.fatalf("%s: not within %s; panel %+v (read error %v)", what, within, s, err)
		}
		time.Sleep(200 * time.Millisecond) // the panel redraws every second; poll
	}
}

// ownersOf counts the partitions of job each node owns on the page ("" for
// none), and the cells in another state than "ok".
func (s clusterPage) ownersOf(job string) (owners map[string]int, notOK int) {
	owners = map[string]int{}
	for _, c := range s.Cells {
		if c.Job == job && c.Partition != "global" {
			owners[c.Node]++
			if c.State != "ok" {
				notOK++
			}
		}
	}
	return owners, notOK
}

// spreadOver says whether every partition of job is owned, fresh, by one
// of want, each of them owning some.
func (s clusterPage) spreadOver(job string, want ...string) bool {
	o, notOK := s.ownersOf(job)
	ok := notOK == 0 && o[""] == 0 && len(o) == len(want)
	for _, w := range want {
		ok = ok && o[w] > 0
	}
	return ok
}

// The Cluster panel on node 1 of three: it lists the nodes with links to
// their dashboards, colours the partitions by owner, shows node 1's
// publish rate and partitions, and after a kill -9 of node 3 shows its
// partitions on n1 and n2 and the failover from n3.
func TestDashboardClusterPanel(t *testing.T) {
	b := newBrowser(t)
	b.shotsDir = shotsDir(t)
	c := startTestCluster(t, 3)
	putJobAt(t, c.url(0), hhSpec)
	b.do("loading node 1's dashboard", chromedp.Navigate(c.url(0)+"/"))

	s := b.waitCluster("the panel lists 3 nodes and the partitions spread over them", 60*time.Second, func(s clusterPage) bool {
		return !s.Hidden && s.Mode == "cluster" && len(s.Nodes) == 3 && s.spreadOver("top", "n1", "n2", "n3")
	})
	b.checkClusterNodes(c, s)
	b.checkClusterRates(c)
	b.shot(b.shotsDir, "cluster-3-nodes", "#cluster")

	kill9(t, c.nodes[2])
	killed := time.Now()
	var sawOld, sawMoving bool
	s = b.waitCluster("n3's partitions on n1 and n2, and its failover listed", 60*time.Second, func(s clusterPage) bool {
		for _, c := range s.Cells {
			sawOld = sawOld || c.State == "old"
			sawMoving = sawMoving || c.State == "moving"
		}
		return s.spreadOver("top", "n1", "n2") && slices.ContainsFunc(s.Moves, func(m clusterMove) bool {
			return m.Job == "top" && m.From == "n3" && (m.To == "n1" || m.To == "n2") && m.Graceful == "false" && m.How == "failover" && strings.Contains(m.Text, "n3 → ")
		})
	})
	t.Logf("the panel showed n3's partitions moved %s after kill -9 (saw a lease past its TTL: %v, a partition without owner: %v); moves: %+v",
		time.Since(killed).Round(time.Millisecond), sawOld, sawMoving, s.Moves)
	b.shot(b.shotsDir, "cluster-after-kill", "#cluster")
	b.checkClusterWarnings()
	b.checkClusterPhone()
	b.checkConsole()
}

// checkClusterNodes checks the node list against GET /v1/cluster: names,
// links to each node's own dashboard, "this node" on n1 only, and the
// time since each was last seen.
func (b *browser) checkClusterNodes(c *testCluster, s clusterPage) {
	b.t.Helper()
	api := c.status(0)
	links := map[string]string{}
	for _, n := range api.Nodes {
		links[n.Name] = "http://" + n.Addr + "/"
	}
	for _, n := range s.Nodes {
		if n.Link != links[n.Name] {
			b.fatalf("node %s links to %q, want %q (GET /v1/cluster: %+v)", n.Name, n.Link, links[n.Name], api.Nodes)
		}
		if n.Self != (n.Name == "n1") {
			b.fatalf("node %s marked this node: %v", n.Name, n.Self)
		}
		if !strings.HasSuffix(n.Seen, " s ago") {
			b.fatalf("node %s last seen %q", n.Name, n.Seen)
		}
	}
	if s.Node != "n1" {
		b.fatalf("the panel is of node %q, want n1", s.Node)
	}
}

// checkClusterRates posts events to node 1 until the panel shows it
// publishing, and shows each node's own rates: n1 ingesting, every node
// processing events of the partitions it owns (each node publishes its
// rates; n1's page has the others' through n1). It then checks the
// partitions it says n1 owns against the API. Every node then counts
// every event: every partition's owner has written its state (a
// failover then has a previous writer to name).
func (b *browser) checkClusterRates(c *testCluster) {
	t := b.t
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	sent := 0
	b.waitCluster("node 1's publish rate", 60*time.Second, func(s clusterPage) bool {
		body := clickBody(sent, 200)
		if ok, err := retryingPost(ctx, c.url(0), "clicks", body); !ok {
			t.Fatalf("posting to n1: %v", err)
		}
		sent += 200
		return s.PubRate != "–" && s.PubRate != "0" && s.Published != "0" && s.ratesShown()
	})
	waitTotal(t, c.url(0), "top", uint64(sent), 60*time.Second)
	b.waitCluster("the partitions n1 owns, as the API says", 60*time.Second, func(s clusterPage) bool {
		var own []string
		for _, j := range c.status(0).Jobs {
			for _, p := range j.Partitions {
				if j.Job == "top" && p.Node == "n1" {
					own = append(own, fmt.Sprint(p.Partition))
				}
			}
		}
		return len(own) > 0 && s.Owns["top"] == strings.Join(own, ",")
	})
}

// ratesShown says whether the node table shows n1 ingesting and every
// node processing.
func (s clusterPage) ratesShown() bool {
	n := 0
	for _, nd := range s.Nodes {
		if positive(nd.Processed) && (nd.Name != "n1" || positive(nd.Ingested)) {
			n++
		}
	}
	return n == 3 && len(s.Nodes) == 3
}

func positive(num string) bool {
	f, err := strconv.ParseFloat(num, 64)
	return err == nil && f > 0
}

// checkClusterWarnings renders a status with a lease past the TTL, a
// partition without owner and one this node holds but does not serve yet
// (a live cluster shows them only for moments) and checks their cells.
func (b *browser) checkClusterWarnings() {
	b.t.Helper()
	got := b.eval("rendering leases in trouble", `(() => {
		renderCluster({node: "n1", nodes: [], counts: {}, moves: [], config: {lease_ttl: "2s"},
			jobs: [{job: "warn-test", partitions: [{partition: 0, node: "n1", lease_age_ms: 300, lag: 0}, {partition: 1, node: "n2", lease_age_ms: 2500},
				{partition: 2, lease_age_ms: 0}, {partition: 3, node: "n1", lease_age_ms: 100}]}]}, Date.now());
		const cells = [...document.querySelectorAll('#cluster .cjob[data-job="warn-test"] .pcell')];
		return Object.fromEntries(cells.map(c => [c.dataset.partition, c.dataset.state + " " + getComputedStyle(c).outlineStyle + " " + c.textContent]));
	})()`)
	want := map[string]string{"0": "ok none p0n1300 ms", "1": "old solid p1n22.5 s", "2": "moving dashed p2moving–", "3": "starting none p3n1taking over"}
	for p, w := range want {
		if got[p] != w {
			b.fatalf("lease cells %v, want %v", got, want)
		}
	}
	b.waitCluster("the next poll replaces the rendered status", 10*time.Second, func(s clusterPage) bool {
		_, ok := s.Owns["warn-test"]
		return !ok && s.spreadOver("top", "n1", "n2")
	})
}

// checkClusterPhone checks that the panel fits a phone.
func (b *browser) checkClusterPhone() {
	b.t.Helper()
	b.do("phone width", chromedp.EmulateViewport(400, 900))
	b.waitCluster("the panel fits a phone", 10*time.Second, func(s clusterPage) bool { return s.Overflow <= 0 })
	b.shot(b.shotsDir, "cluster-400", "#cluster")
	b.do("laptop width", chromedp.EmulateViewport(1280, 900))
}

// A single-node service has no Cluster panel, and the page does not even
// ask for one (the service answers /v1/cluster with 404).
func TestDashboardClusterPanelHiddenSingleNode(t *testing.T) {
	b := newBrowser(t)
	srv := start(t, "serve", "--addr", testaddr.Free(t), "--data", t.TempDir())
	url := srv.url()
	resp, err := http.Get(url + "/v1/cluster")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /v1/cluster of a single node: %s, want 404", resp.Status)
	}
	b.do("loading the dashboard", chromedp.Navigate(url+"/"))
	s := b.waitCluster("the page decides it is single-node", 30*time.Second, func(s clusterPage) bool {
		return s.Conn == "live" && s.Mode != ""
	})
	if s.Mode != "single" || !s.Hidden {
		b.fatalf("Cluster panel on a single node: %+v", s)
	}
	b.checkConsole()
}
