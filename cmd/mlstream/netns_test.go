package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A three-node cluster in network namespaces joined by veth pairs to a
// bridge: one node's link goes down (it is cut off, alive), the others
// take its partitions over and go on taking events; the link comes back,
// the node rejoins and writes nothing over the others' state, and every
// acknowledged event is counted once on every node. It needs root and
// ip(8); elsewhere it is skipped with a message, never in CI.
func TestClusterPartitionedNodeHeals(t *testing.T) {
	net := newNetns(t, 3)
	var routes []string
	for i := range 3 {
		routes = append(routes, net.addr(i, 6222))
	}
	// Routes beyond loopback need the secret.
	secret := filepath.Join(t.TempDir(), "cluster.secret")
	if err := os.WriteFile(secret, []byte("the netns cluster's secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	var nodes []*proc
	for i := range 3 {
		nodes = append(nodes, net.start(t, i, "serve", "--addr", net.addr(i, 8080), "--insecure-no-auth", "--data", t.TempDir(),
			"--node", nodeName(i), "--cluster", routes[i], "--peers", strings.Join(routes, ","), "--lease-ttl", clusterTTL,
			"--cluster-secret", secret,
			"--partitions", "6"))
	}
	c := &testCluster{t: t, nodes: nodes}
	for _, p := range nodes {
		p.url()
	}
	putJobAt(t, c.url(0), hhSpec)
	c.waitOwned(0, "top", 60*time.Second, "n1", "n2", "n3")
	sent := c.postRetrying(0, 9)
	waitTotal(t, c.url(0), "top", uint64(sent), 30*time.Second)

	net.link(2, false)
	c.waitOwned(0, "top", 60*time.Second, "n1", "n2")
	// n3, cut off, says it is stale (it answers, with a frozen model).
	net.waitReady(2, http.StatusServiceUnavailable, `"status":"stale"`, 30*time.Second)
	for i := 9; i < 19; i++ {
		ok, err := retryingPost(t.Context(), c.url(i%2), "clicks", clickBody(i*100, 100))
		if !ok {
			t.Fatalf("posting while n3 is cut off: %v", err)
		}
		sent += 100
	}
	waitTotal(t, c.url(0), "top", uint64(sent), 30*time.Second)

	net.link(2, true)
	c.waitOwned(0, "top", 90*time.Second, "n1", "n2", "n3")
	net.waitReady(2, http.StatusOK, `"status":"ready"`, 30*time.Second)
	sent += c.postRetrying(19, 28)
	for i := range 3 {
		waitTotal(t, c.url(i), "top", uint64(sent), 60*time.Second)
	}
}

// netns is n network namespaces, each with one veth end (eth0, address
// 10.<x>.0.<i+1>) whose other end is on a bridge in the test's namespace,
// which has 10.<x>.0.254 so that the test reaches every node.
type netns struct {
	t      *testing.T
	prefix string // names: <prefix>br, <prefix>n<i>, <prefix>v<i>
	subnet string // 10.<x>.0
	n      int
}

func newNetns(t *testing.T, n int) *netns {
	t.Helper()
	if reason := netnsUnavailable(); reason != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("network namespaces are needed in CI: %s", reason)
		}
		t.Skipf("no network namespaces here: %s", reason)
	}
	x := 100 + os.Getpid()%100
	ns := &netns{t: t, prefix: fmt.Sprintf("mls%d", os.Getpid()%10000), subnet: fmt.Sprintf("10.%d.0", x), n: n}
	t.Cleanup(ns.remove)
	br := ns.prefix + "br"
	ns.ip("link", "add", br, "type", "bridge")
	ns.ip("addr", "add", ns.subnet+".254/24", "dev", br)
	ns.ip("link", "set", br, "up")
	for i := range n {
		name, veth := ns.name(i), ns.veth(i)
		ns.ip("netns", "add", name)
		ns.ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name)
		ns.ip("link", "set", veth, "master", br, "up")
		ns.ip("-n", name, "addr", "add", fmt.Sprintf("%s.%d/24", ns.subnet, i+1), "dev", "eth0")
		ns.ip("-n", name, "link", "set", "eth0", "up")
		ns.ip("-n", name, "link", "set", "lo", "up")
	}
	return ns
}

// netnsUnavailable says why namespaces cannot be made here ("" if they
// can).
func netnsUnavailable() string {
	if os.Geteuid() != 0 {
		return "not root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "no ip(8)"
	}
	if _, err := exec.LookPath("curl"); err != nil {
		return "no curl (to read a cut-off node's /readyz from its namespace)"
	}
	name := fmt.Sprintf("mlsprobe%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Sprintf("ip netns add: %v: %s", err, out)
	}
	_ = exec.Command("ip", "netns", "del", name).Run()
	return ""
}

func (ns *netns) name(i int) string { return fmt.Sprintf("%sn%d", ns.prefix, i) }
func (ns *netns) veth(i int) string { return fmt.Sprintf("%sv%d", ns.prefix, i) }

// addr is node i's address with port.
func (ns *netns) addr(i, port int) string { return fmt.Sprintf("%s.%d:%d", ns.subnet, i+1, port) }

func (ns *netns) ip(args ...string) {
	ns.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		ns.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// link sets node i's link up or down (cut off while alive).
func (ns *netns) link(i int, up bool) {
	state := "down"
	if up {
		state = "up"
	}
	ns.ip("link", "set", ns.veth(i), state)
}

// waitReady waits until node i's /readyz, read from inside its namespace
// (the test cannot reach a node whose link is down), answers code with a
// body holding want.
func (ns *netns) waitReady(i, code int, want string, within time.Duration) {
	ns.t.Helper()
	url := "http://" + ns.addr(i, 8080) + "/readyz"
	var got string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		out, _ := exec.Command("ip", "netns", "exec", ns.name(i), "curl", "-s", "-m", "2", "-w", "\n%{http_code}", url).Output()
		got = string(out)
		if strings.HasSuffix(got, "\n"+strconv.Itoa(code)) && strings.Contains(got, want) {
			return
		}
	}
	ns.t.Fatalf("node %d's /readyz answered %q, want %d with %s", i, got, code, want)
}

// start runs the binary in node i's namespace.
func (ns *netns) start(t *testing.T, i int, args ...string) *proc {
	return startCmd(t, nil, "ip", append([]string{"netns", "exec", ns.name(i), binary}, args...)...)
}

func (ns *netns) remove() {
	for i := range ns.n {
		_ = exec.Command("ip", "netns", "del", ns.name(i)).Run()
		_ = exec.Command("ip", "link", "del", ns.veth(i)).Run()
	}
	_ = exec.Command("ip", "link", "del", ns.prefix+"br").Run()
}
