package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/mlstream/mlstream/cluster"
	"github.com/mlstream/mlstream/cluster/lease"
	"github.com/mlstream/mlstream/runtime"
)

// statusView answers GET /v1/cluster with a fixed cluster.Status: the
// cluster's own type, so that its JSON is what the description is held
// to (a live cluster is tested in cmd/mlstream).
type statusView struct{ s cluster.Status }

func (v statusView) ClusterStatus() any { return v.s }

// GET /v1/cluster matches the description with every node field filled:
// per-node rates, and the counters of fenced outputs.
func TestClusterStatusMatchesDescription(t *testing.T) {
	now := time.Now().UTC()
	lag := int64(3)
	st := cluster.Status{Node: "n1",
		Nodes: []cluster.NodeStatus{
			{NodeInfo: lease.NodeInfo{Name: "n1", Addr: "127.0.0.1:1", Started: now, LastSeen: now},
				Rates: &cluster.NodeRates{Ingested: 1200.5, Processed: 800, Forwarded: 12, Owned: 2, AgeMs: 300}},
			{NodeInfo: lease.NodeInfo{Name: "n2", Addr: "127.0.0.1:2", Started: now, LastSeen: now}},
		},
		Jobs:   []cluster.JobOwners{{Job: "top", Partitions: []cluster.PartOwner{{Partition: 0, Node: "n1", Token: 7, AgeMs: 100, Lag: &lag}}}},
		Counts: cluster.Counts{StaleOutputs: 4, UnownedOutputs: 9},
	}
	ts := newTestServer(t, func(_ *runtime.Config, c *Config) { c.Cluster = statusView{st} })
	code, _, body := ts.do("GET", "/v1/cluster", "", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/cluster: %d %v", code, body)
	}
	nodes, _ := body["nodes"].([]any)
	if len(nodes) != 2 {
		t.Fatalf("nodes %v", body["nodes"])
	}
	rates, _ := nodes[0].(map[string]any)["rates"].(map[string]any)
	if rates["processed_per_s"] != 800.0 || rates["owned_partitions"] != 2.0 {
		t.Fatalf("n1's rates %v", rates)
	}
	if _, ok := nodes[1].(map[string]any)["rates"]; ok {
		t.Fatal("n2 without rates has a rates field")
	}
	counts, _ := body["counts"].(map[string]any)
	if counts["stale_outputs"] != 4.0 || counts["unowned_outputs"] != 9.0 {
		t.Fatalf("counts %v", counts)
	}
}
