package testaddr

import (
	"math/rand/v2"
	"net"
	"path/filepath"
	"strconv"
	"testing"
)

func TestFreeAddressesAreDistinctAndBindable(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		a := Free(t)
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
	}
	lo, hi := portRange()
	for a := range seen {
		_, p, _ := net.SplitHostPort(a)
		port, _ := strconv.Atoi(p)
		if hi > lo && (port < lo || port >= hi) {
			t.Fatalf("%s is outside [%d, %d), below the ephemeral range", a, lo, hi)
		}
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s cannot be bound: %v", a, err)
		}
		l.Close()
	}
}

// A port whose file another holder has locked is passed over: the locks
// below are on file descriptions of their own, as another process's would
// be. The lock files are the test's own, so no other test is kept off.
func TestFreeSkipsPortsLockedElsewhere(t *testing.T) {
	lo, hi := portRange()
	if hi <= lo {
		t.Skip("no ephemeral range to stay below here")
	}
	dir := t.TempDir()
	p := lo + rand.IntN(hi-lo-3)
	for _, port := range []int{p, p + 1} {
		unlock, ok := lockFile(filepath.Join(dir, strconv.Itoa(port)))
		if !ok {
			t.Fatalf("cannot lock the file of port %d in a new directory", port)
		}
		t.Cleanup(unlock)
	}
	if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+2)); err != nil {
		t.Skipf("port %d is in use here: %v", p+2, err)
	} else {
		l.Close()
	}
	if got, want := freeIn(t, dir, p, p+3), "127.0.0.1:"+strconv.Itoa(p+2); got != want {
		t.Fatalf("got %s, want %s, the one port of three not locked", got, want)
	}
}
