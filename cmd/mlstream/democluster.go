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
	"syscall"
)

// demoCluster is what `mlstream demo --nodes N` runs besides itself: the
// other nodes, as child processes of the same binary on loopback ports,
// clustered with this one by the embedded NATS servers' routes.
type demoCluster struct {
	children []*exec.Cmd
	urls     []string // dashboard URLs, this node's first
}

// startDemoCluster sets o up as node n1 of a cluster of n and starts the
// n-1 others; their logs go to <data>/nK.log.
func startDemoCluster(o *serverOptions, n int, stderr io.Writer) (*demoCluster, error) {
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
	dc := &demoCluster{urls: []string{dashboardURL("http", o.addr)}}
	for i := 1; i < n; i++ {
		name := fmt.Sprintf("n%d", i+1)
		logf, err := os.Create(filepath.Join(root, name+".log"))
		if err != nil {
			dc.stop()
			return nil, err
		}
		cmd := exec.Command(self, "serve", "--addr", addrs[i], "--data", filepath.Join(root, name), "--node", name,
			"--cluster", routes[i], "--peers", peers, "--lease-ttl", o.cl.leaseTTL.String(), "--cluster-secret", o.cl.secretFile)
		cmd.Stdout, cmd.Stderr = logf, logf
		// The children go with the demo, even when it is killed.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
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
	}
	if err := os.MkdirAll(o.data, 0o755); err != nil {
		dc.stop()
		return nil, err
	}
	return dc, nil
}

// banner tells where each node's dashboard is and how to kill one.
func (dc *demoCluster) banner(w io.Writer, root string) {
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

func (dc *demoCluster) stop() {
	for _, c := range dc.children {
		_ = c.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range dc.children {
		_ = c.Wait()
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
