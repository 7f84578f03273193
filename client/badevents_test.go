package client_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/runtime"
)

// With OnBadEvent, a batch with bad events costs only those: each is
// reported with its tag and the server's error, and the good events of its
// batch are accepted, each once.
func TestSenderLeavesOutBadEvents(t *testing.T) {
	srv, _ := startServer(t, runtime.Config{}, nil)
	c := newClient(t, srv.http.URL, client.Config{})
	putJob(t, c, 0)
	var mu sync.Mutex
	var bad []string
	s := c.NewSender(t.Context(), "mail", client.SenderConfig{
		MaxEvents: 50, Concurrency: 2,
		OnBadEvent: func(ev client.BadEvent) {
			mu.Lock()
			defer mu.Unlock()
			bad = append(bad, fmt.Sprintf("%d %s %s", ev.Tag, ev.Err.Field, ev.Event))
		},
	})
	lines := strings.Split(strings.TrimSpace(string(events(0, 200))), "\n")
	badAt := map[int]string{10: `{"label":"maybe","features":{}}`, 11: `{"lable":1,"features":{}}`, 120: `not json`, 149: `{"label":1}`}
	for i, l := range lines {
		if b, ok := badAt[i]; ok {
			l = b
		}
		if err := s.AddRaw([]byte(l), int64(1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Added != 200 || st.Sent != 200 || st.Accepted != 196 || st.Refused != 4 {
		t.Errorf("stats %+v", st)
	}
	mu.Lock()
	got := strings.Join(bad, "\n")
	mu.Unlock()
	want := []string{`1010 label {"label":"maybe","features":{}}`, `1011 lable {"lable":1,"features":{}}`, `1120  not json`, `1149 features {"label":1}`}
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("bad events lack %q:\n%s", w, got)
		}
	}
	job, _ := srv.engine.Job("spam")
	waitFor(t, "every good event processed", 10*time.Second, func() bool { return job.Status(false).Processed == 196 })
}
