// Package testaddr hands out loopback TCP addresses to tests that must name
// a port before something binds it: a node's HTTP address passed to a
// process of the binary, a NATS route its peers dial. Asking the kernel for
// port 0 and closing the listener is not enough there: the kernel may give
// the same port to another test binary (go test runs packages side by
// side) or to any outgoing connection's local end before the process it was
// meant for binds it.
//
// So the ports come from below the kernel's ephemeral range (which it never
// hands out by itself), and each is reserved across processes by a lock
// on a file named after it in a directory of the user's in the temporary
// directory, held until the test that took it ends. A port that something
// else has bound is passed over.
package testaddr

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// span is how many ports below the ephemeral range are used.
const span = 8192

// Free returns a loopback address ("127.0.0.1:port") that no other test of
// any process holds and that nothing listens on now. It stays reserved
// until t and its cleanups end.
func Free(t testing.TB) string {
	t.Helper()
	lo, hi := portRange()
	if hi <= lo {
		return kernelPort(t)
	}
	// One directory per user: another user's lock files could not be
	// opened (nor new ones made in their directory).
	return freeIn(t, filepath.Join(os.TempDir(), "mlstream-testaddr-"+strconv.Itoa(os.Getuid())), lo, hi)
}

// freeIn is Free with the ports of [lo, hi) and their lock files in dir.
func freeIn(t testing.TB, dir string, lo, hi int) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatalf("testaddr: %v", err)
	}
	start := rand.IntN(hi - lo)
	for i := range hi - lo {
		port := lo + (start+i)%(hi-lo)
		if release, ok := reserve(dir, port); ok {
			t.Cleanup(release)
			return "127.0.0.1:" + strconv.Itoa(port)
		}
	}
	t.Fatalf("testaddr: every port in [%d, %d) is taken", lo, hi)
	return ""
}

// reserve takes port if no holder has its lock and it can be bound now,
// and returns what gives it back.
func reserve(dir string, port int) (release func(), ok bool) {
	unlock, ok := lockFile(filepath.Join(dir, strconv.Itoa(port)))
	if !ok {
		return nil, false
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		unlock()
		return nil, false
	}
	l.Close()
	return unlock, true
}

// portRange is the span of ports just below the ephemeral range, or an
// empty one when that range cannot be read or leaves no room.
func portRange() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low < 1024+span {
		return 0, 0
	}
	return low - span, low
}

// kernelPort is the fallback where the ephemeral range is unknown: a port
// the kernel picks, not reserved across processes.
func kernelPort(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(fmt.Errorf("testaddr: %w", err))
	}
	defer l.Close()
	return l.Addr().String()
}
