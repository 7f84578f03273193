package lease

import "sync"

// serial runs functions one after the other per key, each key on its own
// goroutine, so a slow handler call for one key holds up no other key.
type serial struct {
	mu     sync.Mutex
	queues map[string][]func() // present while a goroutine runs for the key
	wg     sync.WaitGroup
}

func newSerial() *serial { return &serial{queues: make(map[string][]func())} }

func (s *serial) do(key string, f func()) {
	s.mu.Lock()
	q, running := s.queues[key]
	s.queues[key] = append(q, f)
	s.mu.Unlock()
	if !running {
		s.wg.Add(1)
		go s.run(key)
	}
}

func (s *serial) run(key string) {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		q := s.queues[key]
		if len(q) == 0 {
			delete(s.queues, key)
			s.mu.Unlock()
			return
		}
		f := q[0]
		s.queues[key] = q[1:]
		s.mu.Unlock()
		f()
	}
}
