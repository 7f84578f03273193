//go:build !unix

package testaddr

import "sync"

// held are the lock files this process holds, where there is no flock to
// keep other processes off them: only its own reservations are kept apart.
var held = struct {
	sync.Mutex
	paths map[string]bool
}{paths: map[string]bool{}}

func lockFile(path string) (unlock func(), ok bool) {
	held.Lock()
	defer held.Unlock()
	if held.paths[path] {
		return nil, false
	}
	held.paths[path] = true
	return func() {
		held.Lock()
		delete(held.paths, path)
		held.Unlock()
	}, true
}
