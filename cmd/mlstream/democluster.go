package main

import (
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// demoCluster is what `mlstream demo --nodes N` runs besides itself: the
// other nodes, as child processes of the same binary on loopback ports,
// clustered with this one by the embedded NATS servers' routes.
type demoCluster struct {
	children []*exec.Cmd
	urls     []string // dashboard URLs, this node's first
	// exited is closed when child i has exited and been reaped (watch).
	exited []chan struct{}
	// stopping is set once the demo stops its children: an exit before
	// that is a node that died, which the demo reports.
	stopping atomic.Bool
	out      io.Writer // where a dead node is reported
	outMu    sync.Mutex
}

// demoStopGrace bounds a demo node's shutdown. The demo stops the whole
// cluster at once: a node leaving hands its partitions to peers that are
// leaving too, and with a node dead the last ones lack the quorum of
// their streams, so a full handover may never end. A partition not handed
// over is recovered from the cluster's log at the next start, as after a
// crash.
const demoStopGrace = 5 * time.Second

// startDemoCluster sets o up as node n1 of a cluster of n and starts the
// n-1 others; their logs go to <data>/nK.log.
func startDemoCluster(o *serverOptions, n int, stdout io.Writer) (*demoCluster, error) {
	if o.data == "" {
		return nil, fmt.Errorf("--nodes needs --data: each node keeps its streams there")
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	routes, addrs := make([]string, n), make([]string, n)
	for i := range n {
		if routes[i], err = freeLoopback(); err != nil {
			return nil, err
		}
		if i == 0 {
			addrs[0] = o.addr
		} else if addrs[i], err = freeLoopback(); err != nil {
			return nil, err
		}
	}
	root := o.data
	// The children's logs go to root, which a first demo has not made yet.
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	peers := strings.Join(routes, ",")
	// The routes authenticate with a secret of the demo's own (needed when
	// the demo has tokens, and harmless otherwise).
	if o.cl.secretFile == "" {
		o.cl.secretFile = filepath.Join(root, "cluster.secret")
		if err := os.WriteFile(o.cl.secretFile, []byte(rand.Text()), 0o600); err != nil {
			return nil, err
		}
	}
	o.cl.node, o.cl.routeAddr, o.cl.peers, o.data = "n1", routes[0], peers, filepath.Join(root, "n1")
	if o.shutdownGrace > demoStopGrace {
		o.shutdownGrace = demoStopGrace
	}
	dc := &demoCluster{urls: []string{dashboardURL("http", o.addr)}, out: stdout}
	for i := 1; i < n; i++ {
		name := fmt.Sprintf("n%d", i+1)
		logf, err := os.Create(filepath.Join(root, name+".log"))
		if err != nil {
			dc.stop()
			return nil, err
		}
		cmd := exec.Command(self, "serve", "--addr", addrs[i], "--data", filepath.Join(root, name), "--node", name,
			"--cluster", routes[i], "--peers", peers, "--lease-ttl", o.cl.leaseTTL.String(), "--shutdown-timeout", o.shutdownGrace.String(),
			"--cluster-secret", o.cl.secretFile)
		cmd.Stdout, cmd.Stderr = logf, logf
		// The children go with the demo, even when it is killed; a
		// process group of their own keeps the terminal's Ctrl-C from
		// them: the demo stops them (stop).
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
		if err := os.MkdirAll(filepath.Join(root, name), 0o755); err != nil {
			dc.stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			dc.stop()
			return nil, err
		}
		logf.Close()
		dc.children = append(dc.children, cmd)
		dc.urls = append(dc.urls, dashboardURL("http", addrs[i]))
		exited := make(chan struct{})
		dc.exited = append(dc.exited, exited)
		// watch gets its child, not the slices this loop still grows.
		go dc.watch(i+1, cmd, exited)
	}
	if err := os.MkdirAll(o.data, 0o755); err != nil {
		dc.stop()
		return nil, err
	}
	return dc, nil
}

// banner tells where each node's dashboard is and how to kill one; self
// is this node's URL, as it listens.
func (dc *demoCluster) banner(w io.Writer, root, self string) {
	dc.outMu.Lock()
	defer dc.outMu.Unlock()
	dc.urls[0] = self
	fmt.Fprintf(w, "  a cluster of %d nodes on loopback; every node serves every job:\n", len(dc.urls))
	for i, u := range dc.urls {
		pid := os.Getpid()
		if i > 0 {
			pid = dc.children[i-1].Process.Pid
		}
		fmt.Fprintf(w, "    n%d  %s  (pid %d)\n", i+1, u, pid)
	}
	last := dc.children[len(dc.children)-1].Process.Pid
	fmt.Fprintf(w, "  kill a node and watch its partitions move (cluster view: %sv1/cluster):\n", dc.urls[0])
	fmt.Fprintf(w, "    kill -9 %d     # node n%d; its log is %s\n", last, len(dc.urls), filepath.Join(root, fmt.Sprintf("n%d.log", len(dc.urls))))
}

// watch reaps child c, node n<node>, when it exits, closes exited, and
// reports a node that died while the demo runs.
func (dc *demoCluster) watch(node int, c *exec.Cmd, exited chan struct{}) {
	err := c.Wait()
	close(exited)
	if dc.stopping.Load() {
		return
	}
	how := "exited"
	if err != nil {
		how = err.Error()
	}
	dc.outMu.Lock()
	defer dc.outMu.Unlock()
	fmt.Fprintf(dc.out, "  node n%d (pid %d) is gone (%s): the others take its partitions over once its leases lapse; "+
		"with a node dead, Ctrl-C stops the rest within about %v\n", node, c.Process.Pid, how, demoStopGrace)
}

// stop asks every child that runs to shut down and waits until all have
// exited, killing those still there after their shutdown grace.
func (dc *demoCluster) stop() {
	dc.stopping.Store(true)
	for i, c := range dc.children {
		select {
		case <-dc.exited[i]:
		default:
			_ = c.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(demoStopGrace + 5*time.Second)
	for i, c := range dc.children {
		select {
		case <-dc.exited[i]:
		case <-deadline:
			_ = c.Process.Kill()
			<-dc.exited[i]
		}
	}
}

func freeLoopback() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
