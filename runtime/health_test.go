package runtime

import (
	"math"
	"strings"
	"testing"
	"time"
)

// A job whose coordination overhead stays past its bound is not ok,
// whether its group is fixed, at max_group, or still growing (the
// demo's logreg job showed 86% against [5%, 10%] with an "ok" badge); a
// group adapting for a second or two, one within its bound and an idle
// job's old figure are.
func TestHealthCoordinationPastItsBound(t *testing.T) {
	g := func(mode string, size, overhead float64, groups uint64) *GroupStatus {
		return &GroupStatus{Mode: mode, Size: size, Overhead: overhead, Low: 0.05, High: 0.10, Groups: groups}
	}
	// series is a window of samples, oldest first, with the group sizes
	// given, in which the groups measured spend share of their time
	// coordinating; idle: no group measured in it.
	series := func(sizes []float64, share float64, idle bool) []*GroupStatus {
		out := make([]*GroupStatus, len(sizes))
		for i, size := range sizes {
			x := g("auto", size, 0.86, 40)
			if !idle {
				x.Groups += uint64(10 * i)
				x.coordNs, x.workNs = int64(share*float64(i)*1e9), int64((1-share)*float64(i)*1e9)
			}
			out[i] = x
		}
		return out
	}
	growing := []float64{1, 2, 4, 8, 16, 32}
	for _, c := range []struct {
		name   string
		cur    *GroupStatus
		recent []*GroupStatus
		text   string // "" for no reason
		why    string
	}{
		{"fixed", g("fixed", 5, 0.86, 9), nil, "coordination 86% > 10%", "(the last group's) at the fixed group size 5: raise sync.every"},
		{"at max group", g("auto", 1024, 0.48, 900), nil, "coordination 48% > 10%", "at max group 1024"},
		{"at max group, measured", g("auto", 1024, 0.05, 900), series([]float64{1024, 1024, 1024, 1024, 1024, 1024}, 0.77, false), "coordination 77% > 10%", "(over the last 5 s, the groups') at max group 1024"},
		{"growing, above for 5 s", g("auto", 32, 0.86, 90), series(growing, 0.86, false), "coordination 86% > 10%", "grew from 1 to 32 batches"},
		{"flat, above for 5 s", g("auto", 8, 0.5, 90), series([]float64{8, 8, 8, 8, 8, 8}, 0.3, false), "coordination 30% > 10%", "coordination 30% > 10% (over the last 5 s, the groups'): coordinating costs more"},
		{"one dear group among cheap ones", g("auto", 32, 0.86, 90), series(growing, 0.02, false), "", ""},
		{"at max group, one dear group among cheap ones", g("auto", 1024, 0.86, 90), series([]float64{1024, 1024, 1024, 1024, 1024, 1024}, 0.02, false), "", ""},
		{"window not full", g("auto", 4, 0.86, 20), series(growing[:3], 0.86, false), "", ""},
		{"idle", g("auto", 32, 0.86, 40), series(growing, 0, true), "", ""},
		{"idle at max group", g("auto", 1024, 0.86, 40), series([]float64{1024, 1024, 1024, 1024, 1024, 1024}, 0, true), "coordination 86% > 10%", "(the last group's) at max group"},
	} {
		r := coordinationHealth(c.cur, c.recent, 1024)
		switch {
		case c.text == "" && r != nil:
			t.Errorf("%s: %+v, want none", c.name, *r)
		case c.text != "" && (r == nil || r.Code != "coordination" || r.Text != c.text || !strings.Contains(r.Why, c.why)):
			t.Errorf("%s: %+v, want %q saying %q", c.name, r, c.text, c.why)
		}
	}
}

// The status of a real job says warn, with the reason, once its
// partitions' overhead stays above the bound over the sampling window
// while the controller doubles the group; and ok before.
func TestJobStatusHealthFromSamples(t *testing.T) {
	e := testEngine(t, Config{Partitions: 2})
	j := mustPut(t, e, Spec{Name: "j", Kind: "heavy_hitters", Input: "s", Params: map[string]any{"field": "item"}})
	if h := j.Status(false).Health; h.Status != "ok" || len(h.Reasons) != 0 {
		t.Fatalf("a new job's health %+v, want ok", h)
	}
	now := time.Now()
	for i := range coordWindow + 1 {
		for _, p := range j.parts {
			p.group.pubSize.Store(int64(1) << i)
			p.group.pubOverhead.Store(math.Float64bits(0.86))
			p.group.groups.Add(3)
			p.group.coordNs.Add(86e6)
			p.group.workNs.Add(14e6)
		}
		j.sample(now.Add(time.Duration(i) * time.Second))
		// The engine's own sampler may add a sample between these (each
		// second): it cannot fill the window before the third.
		if h := j.Status(false).Health; i <= 2 && h.Status != "ok" {
			t.Fatalf("after %d s above the bound: %+v, want ok while the group adapts", i, h)
		}
	}
	h := j.Status(false).Health
	if h.Status != "warn" || len(h.Reasons) != 1 || h.Reasons[0].Text != "coordination 86% > 10%" ||
		!strings.Contains(h.Reasons[0].Why, "to 32 batches") {
		t.Fatalf("health %+v, want warn: coordination 86%% > 10%%, the group grew from 1 to 32", h)
	}
}

// owningCluster is a Cluster whose leases leave the given partitions
// without an owner.
type owningCluster struct {
	publishedKeys
	unowned []int
}

func (c *owningCluster) Unowned(string) []int { return c.unowned }

// A job with partitions no node holds is not ok, and says which.
func TestHealthUnownedPartitions(t *testing.T) {
	cl := &owningCluster{unowned: []int{1, -1}}
	e := testEngine(t, Config{Cluster: cl})
	j := mustPut(t, e, Spec{Name: "j", Kind: "heavy_hitters", Input: "s", Partitions: 2, Params: map[string]any{"field": "item"}})
	h := j.Status(false).Health
	if h.Status != "warn" || len(h.Reasons) != 1 || h.Reasons[0].Code != "unowned" || h.Reasons[0].Text != "2 partitions have no owner" ||
		!strings.Contains(h.Reasons[0].Why, "lease of 1, the global unit") {
		t.Fatalf("health %+v, want warn naming partition 1 and the global unit", h)
	}
	cl.unowned = []int{1}
	if h := j.Status(false).Health; h.Status != "warn" || h.Reasons[0].Text != "partition 1 has no owner" {
		t.Fatalf("health %+v, want partition 1 named", h)
	}
	cl.unowned = nil
	if h := j.Status(false).Health; h.Status != "ok" {
		t.Fatalf("health %+v with every partition owned, want ok", h)
	}
}

// The engine counts a request's events once, however many jobs read its
// stream: the cluster panel's ingest rate is made of it (it showed 8,400
// events/s for 2,300 posted when the demo's jobs read one stream).
func TestAcceptedEventsCountsEventsNotJobs(t *testing.T) {
	for _, cl := range []Cluster{nil, &publishedKeys{}} {
		e := testEngine(t, Config{Cluster: cl})
		for _, name := range []string{"a", "b", "c"} {
			mustPut(t, e, Spec{Name: name, Kind: "heavy_hitters", Input: "s", Params: map[string]any{"field": "item"}})
		}
		ev := `{"item":"x"}`
		for range 2 {
			if _, err := ingest(e, "s", ev, ev, ev, ev, ev); err != nil {
				t.Fatal(err)
			}
		}
		if got := e.AcceptedEvents(); got != 10 {
			t.Errorf("cluster %T: %d events accepted, want 10 (5 a request, 2 requests, whatever the 3 jobs)", cl, got)
		}
	}
}
