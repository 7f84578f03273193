//go:build !unix

package testaddr

// lockFile reserves nothing across processes where there is no flock:
// only this process's own reservations are kept apart.
func lockFile(string) (unlock func(), ok bool) { return func() {}, true }
