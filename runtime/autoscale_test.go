package runtime

import (
	"errors"
	goruntime "runtime"
	"strings"
	"testing"
	"time"
)

// The rule alone, on given rates: up at once, down only past the
// hysteresis, never within the cool-down, within [min, effective max].
func TestAutoscaleDecide(t *testing.T) {
	a := newAutoscaler(AutoscaleSpec{Min: 2, Max: 64, TargetUtilization: 0.5, Cooldown: "30s"}, 6, false)
	if want := min(6, goruntime.GOMAXPROCS(0)); a.maxParts != want {
		t.Fatalf("effective max %d, want %d (max, --max-partitions and GOMAXPROCS)", a.maxParts, want)
	}
	a.maxParts = 6 // as on a machine of 6 cores or more
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		n              int
		input, rate    float64
		since          time.Duration // since the last rescale; 0: none yet
		action         string
		target         int
		reasonContains string
	}{
		{3, 1000, 0, 0, "hold", 3, "no processing measured"},
		{3, 1000, 1000, 0, "hold", 3, "hysteresis"}, // needs 2, and 2 × 1.15 rounds up to 3
		{2, 1500, 1000, 0, "up", 3, "needs 3.00"},   // 1500/(1000·0.5) = 3
		{2, 1500, 1000, 10 * time.Second, "hold", 2, "cooldown"},
		{2, 1500, 1000, 31 * time.Second, "up", 3, ""},
		{3, 100000, 1000, 0, "up", 6, ""},           // clamped to the effective max
		{6, 10, 1000, 0, "down", 2, ""},             // to min
		{4, 1900, 1000, 0, "hold", 4, "hysteresis"}, // needs 3.8 → 4
		{5, 1900, 1000, 0, "hold", 5, "hysteresis"}, // 3.8 × 1.15 rounds up to 5
		{6, 1900, 1000, 0, "down", 5, ""},           // to 5, not 4: 4 would sit at the edge of its band
	} {
		a.rescaled = time.Time{}
		if c.since > 0 {
			a.rescaled = t0.Add(-c.since)
		}
		d := a.decide(t0, c.n, c.input, c.rate)
		if d.Action != c.action || d.Target != c.target || !strings.Contains(d.Reason, c.reasonContains) {
			t.Errorf("n %d input %v rate %v since %v: %s to %d (%s), want %s to %d (%q)", c.n, c.input, c.rate, c.since,
				d.Action, d.Target, d.Reason, c.action, c.target, c.reasonContains)
		}
	}
}

// In a cluster the count is capped at the cores of its live nodes, not
// at the process's, and a decision that needs more says that the cluster
// needs another node.
func TestAutoscaleDecideInACluster(t *testing.T) {
	a := newAutoscaler(AutoscaleSpec{Min: 1, Max: 64, TargetUtilization: 0.5, Cooldown: "0s"}, 256, true)
	if a.maxParts != 64 {
		t.Fatalf("effective max %d before the cluster's cores are known, want 64 (not GOMAXPROCS)", a.maxParts)
	}
	a.setCores(6)
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		n           int
		input, rate float64
		action      string
		target      int
		needsNode   bool
	}{
		{2, 2500, 1000, "up", 5, false},   // needs 5 of 6 cores
		{2, 3000, 1000, "up", 6, false},   // needs 6: all of them
		{2, 10000, 1000, "up", 6, true},   // needs 20: capped at 6, and says so
		{6, 10000, 1000, "hold", 6, true}, // at the cap, still short
		{6, 100, 1000, "down", 1, false},
	} {
		d := a.decide(t0, c.n, c.input, c.rate)
		if d.Action != c.action || d.Target != c.target || d.NeedsNode != c.needsNode || d.Cores != 6 {
			t.Errorf("n %d input %v: %s to %d, needs node %v, cores %d (%s); want %s to %d, needs node %v",
				c.n, c.input, d.Action, d.Target, d.NeedsNode, d.Cores, d.Reason, c.action, c.target, c.needsNode)
		}
		if c.needsNode && !strings.Contains(d.Reason, "needs another node") {
			t.Errorf("the reason does not say so: %s", d.Reason)
		}
	}
	if st := a.status(); st.EffectiveMax != 6 {
		t.Errorf("effective max in the status %d, want the cluster's 6 cores", st.EffectiveMax)
	}
}

func TestAutoscaleSpecErrors(t *testing.T) {
	base := func(a *AutoscaleSpec, partitions int) Spec {
		return Spec{Name: "a", Kind: "heavy_hitters", Input: "s", Partitions: partitions, Params: map[string]any{"field": "u"}, Autoscale: a}
	}
	for _, c := range []struct {
		spec  Spec
		field string
	}{
		{base(&AutoscaleSpec{Min: -1}, 0), "autoscale.min"},
		{base(&AutoscaleSpec{Min: 4, Max: 2}, 0), "autoscale.max"},
		{base(&AutoscaleSpec{Max: MaxPartitions + 1}, 0), "autoscale.max"},
		{base(&AutoscaleSpec{TargetUtilization: 1.5}, 0), "autoscale.target_utilization"},
		{base(&AutoscaleSpec{TargetUtilization: -0.1}, 0), "autoscale.target_utilization"},
		{base(&AutoscaleSpec{Cooldown: "soon"}, 0), "autoscale.cooldown"},
		{base(&AutoscaleSpec{Cooldown: "-1s"}, 0), "autoscale.cooldown"},
		{base(&AutoscaleSpec{Min: 2, Max: 4}, 8), "partitions"},
	} {
		var se *SpecError
		if err := c.spec.validate(2, 100); !errors.As(err, &se) || se.Field != c.field {
			t.Errorf("%+v: %v, want an error of field %s", c.spec.Autoscale, err, c.field)
		}
	}
	s := base(&AutoscaleSpec{Min: 3, Max: 5}, 0)
	if err := s.validate(2, 100); err != nil || s.Partitions != 3 || s.Autoscale.TargetUtilization != 0.7 || s.Autoscale.Cooldown != "30s" {
		t.Fatalf("defaults: %v %+v partitions %d", err, s.Autoscale, s.Partitions)
	}
}

// The engine's own loop decides every AutoscaleInterval, and ends with
// the job.
func TestAutoscaleLoopDecides(t *testing.T) {
	e := testEngine(t, Config{Partitions: 1, AutoscaleInterval: 5 * time.Millisecond})
	j := mustPut(t, e, Spec{Name: "a", Kind: "heavy_hitters", Input: "s", Params: map[string]any{"field": "u"},
		Autoscale: &AutoscaleSpec{Min: 1, Max: 1}})
	deadline := time.Now().Add(10 * time.Second)
	for len(j.elasticStatus().Autoscale.Decisions) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("decisions %+v", j.elasticStatus().Autoscale)
		}
		time.Sleep(time.Millisecond)
	}
	a := j.elastic.autoscaler()
	if err := e.DeleteJob("a"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.stop:
	default:
		t.Fatal("the autoscaler's loop was not told to stop")
	}
}
