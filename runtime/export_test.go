package runtime

// SetReplayHook makes every recovery call fn before it replays a
// partition's item log, until the test ends.
func SetReplayHook(t interface{ Cleanup(func()) }, fn func(job string, partition int)) {
	replayHook.Store(&fn)
	t.Cleanup(func() { replayHook.Store(nil) })
}

// DeleteWaiting says whether a DeleteJob waits for the creation of name
// to end.
func (e *Engine) DeleteWaiting(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.mu.creating[name]
	return r != nil && r.deleted
}
