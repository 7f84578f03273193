package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/ft"
	"github.com/mlstream/mlstream/runtime"
)

// events returns n labelled NDJSON events with keys k<from>..k<from+n-1>.
func events(from, n int) []byte {
	var sb strings.Builder
	for i := from; i < from+n; i++ {
		fmt.Fprintf(&sb, `{"key":"k%d","label":%d,"features":{"x":%d,"c":"v%d"}}`+"\n", i, i%2, i%7, i%3)
	}
	return []byte(sb.String())
}

func newClient(t *testing.T, url string, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// putJob declares a logreg job "spam" on stream "mail".
func putJob(t *testing.T, c *client.Client, queueSize int) {
	t.Helper()
	created, err := c.PutJob(t.Context(), client.JobSpec{Name: "spam", Kind: "logreg", Input: "mail", Partitions: 1, QueueSize: queueSize, Params: map[string]any{"hash_bits": 12}})
	if err != nil || !created {
		t.Fatalf("PutJob: created %v, %v", created, err)
	}
}

// A request refused with 429 because the job's queue is full is retried
// after the delay the server asks, and accepted once the queue drains.
func TestPostEventsRetries429UntilAccepted(t *testing.T) {
	srv, _ := startServer(t, runtime.Config{IngestWait: 20 * time.Millisecond}, nil)
	var retries []client.Retry
	var mu sync.Mutex
	var job *runtime.Job
	c := newClient(t, srv.http.URL, client.Config{OnRetry: func(r client.Retry) {
		mu.Lock()
		retries = append(retries, r)
		mu.Unlock()
		job.Resume() // the queue drains: the retry finds room
	}})
	putJob(t, c, 100)
	job, _ = srv.engine.Job("spam")
	job.Pause()
	if ing, err := c.PostEvents(t.Context(), "mail", events(0, 100)); err != nil || ing.Accepted != 100 {
		t.Fatalf("filling the queue: %+v, %v", ing, err)
	}
	ing, err := c.PostEvents(t.Context(), "mail", events(100, 50))
	if err != nil || ing.Accepted != 50 {
		t.Fatalf("after a 429: %+v, %v", ing, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(retries) == 0 {
		t.Fatal("no retry: the queue was never full")
	}
	var e *client.Error
	if !errors.As(retries[0].Err, &e) || e.Status != http.StatusTooManyRequests || e.RetryAfter <= 0 || retries[0].Wait != e.RetryAfter {
		t.Fatalf("first retry: %+v (error %#v)", retries[0], retries[0].Err)
	}
	if !strings.Contains(e.Message, "nothing of this request was accepted") {
		t.Errorf("429 message: %q", e.Message)
	}
	waitFor(t, "every event processed", 10*time.Second, func() bool { return job.Status(false).Processed == 150 })
}

// Refusals come back as *Error with the fields of the server's body, and
// are not retried.
func TestErrorFields(t *testing.T) {
	srv, _ := startServer(t, runtime.Config{}, nil)
	var retried atomic.Int32
	c := newClient(t, srv.http.URL, client.Config{OnRetry: func(client.Retry) { retried.Add(1) }})
	putJob(t, c, 0)
	ctx := t.Context()

	_, err := c.PostEvents(ctx, "mail", []byte(`{"key":"a","label":1,"features":["x"]}`+"\n"+`{"key":"b","label":7,"features":["x"]}`+"\n"))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 400 || e.Line != 2 || e.Field != "label" || e.Message == "" {
		t.Errorf("bad label: %#v", err)
	}
	if want := `400 Bad Request: line 2: `; err == nil || !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), `(field "label")`) {
		t.Errorf("message %q", err)
	}
	if _, err = c.PostEvents(ctx, "nowhere", events(0, 1)); !errors.As(err, &e) || e.Status != 404 || !strings.Contains(e.Message, "nowhere") {
		t.Errorf("unknown stream: %#v", err)
	}
	_, err = c.PutJob(ctx, client.JobSpec{Name: "bad", Kind: "logreg", Input: "mail", Params: map[string]any{"hash_bits": 99}})
	if !errors.As(err, &e) || e.Status != 400 || e.Field != "params.hash_bits" {
		t.Errorf("bad spec: %#v", err)
	}
	_, err = c.PutJob(ctx, client.JobSpec{Name: "spam", Kind: "logreg", Input: "other"})
	if !errors.As(err, &e) || e.Status != 409 {
		t.Errorf("taken name: %#v", err)
	}
	if _, err = c.TopK(ctx, "spam", 5, ""); !errors.As(err, &e) || e.Status != 400 {
		t.Errorf("topk of a logreg job: %#v", err)
	}
	if _, err = c.Distinct(ctx, "nope", ""); !errors.As(err, &e) || e.Status != 404 {
		t.Errorf("unknown job: %#v", err)
	}
	if _, err = c.Subscribe(ctx, client.SubscribeOptions{Types: []string{"gossip"}}); !errors.As(err, &e) || e.Status != 400 || e.Field != "types" {
		t.Errorf("subscribing to an unknown type: %#v", err)
	}
	if n := retried.Load(); n != 0 {
		t.Errorf("%d retries of final refusals", n)
	}
}

// Against a URL where nothing listens, a call gives up after GiveUpAfter
// with an error that says why.
func TestGiveUpOnDeadURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there any more
	var retries atomic.Int32
	c := newClient(t, url, client.Config{
		Retry:   client.RetryPolicy{GiveUpAfter: 300 * time.Millisecond, Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		OnRetry: func(client.Retry) { retries.Add(1) },
	})
	start := time.Now()
	_, err = c.PostEvents(t.Context(), "mail", events(0, 3))
	elapsed := time.Since(start)
	var gu *client.GiveUpError
	if !errors.As(err, &gu) || gu.MaxRetries || gu.Retries == 0 || int(retries.Load()) != gu.Retries {
		t.Fatalf("err = %#v (retries seen %d)", err, retries.Load())
	}
	if !strings.Contains(err.Error(), "no answer but failures for") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("message: %v", err)
	}
	if elapsed > 2*time.Second {
		t.Errorf("gave up after %v, want about 300ms", elapsed)
	}
	var ne *net.OpError
	if !errors.As(err, &ne) {
		t.Errorf("does not wrap the network error: %#v", gu.Err)
	}

	c = newClient(t, url, client.Config{Retry: client.RetryPolicy{MaxRetries: 2, Backoff: time.Millisecond}})
	if _, err = c.Jobs(t.Context()); !errors.As(err, &gu) || !gu.MaxRetries || gu.Retries != 2 {
		t.Errorf("max retries: %v", err)
	}
	c = newClient(t, url, client.Config{Retry: client.RetryPolicy{MaxRetries: -1}})
	if _, err = c.Jobs(t.Context()); !errors.As(err, &gu) || gu.Retries != 0 {
		t.Errorf("no retries: %v", err)
	}
}

// A subscription receives the predictions of the events posted after
// Subscribe returned, typed.
func TestSubscriptionReceivesPredictions(t *testing.T) {
	srv, _ := startServer(t, runtime.Config{}, nil)
	c := newClient(t, srv.http.URL, client.Config{})
	putJob(t, c, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	sub, err := c.Subscribe(ctx, client.SubscribeOptions{Jobs: []string{"spam"}, Types: []string{client.TypePrediction}, WaitSubscribed: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := c.PostEvents(ctx, "mail", events(0, 20)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PostEvents(ctx, "mail", []byte(`{"key":"unlabelled","features":{"x":1}}`)); err != nil {
		t.Fatal(err)
	}
	seen := map[string]client.PredictionMessage{}
	for len(seen) < 21 {
		m, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d predictions: %v", len(seen), err)
		}
		if m.Type != client.TypePrediction || m.Job != "spam" {
			t.Fatalf("message %s", m.Raw)
		}
		p, err := m.Prediction()
		if err != nil || p.P <= 0 || p.P >= 1 || p.TS != m.TS {
			t.Fatalf("prediction %+v, %v: %s", p, err, m.Raw)
		}
		if _, err := m.TopK(); err == nil {
			t.Error("a prediction decodes as a topk message")
		}
		seen[p.Key] = p
	}
	if p := seen["k3"]; p.Label == nil || *p.Label != 1 {
		t.Errorf("k3: label %v", p.Label)
	}
	if p := seen["unlabelled"]; p.Label != nil {
		t.Errorf("unlabelled has a label: %v", *p.Label)
	}
	sub.Close()
	if _, err := sub.Next(ctx); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Next after Close: %v", err)
	}
}

// The token goes with every request, the WebSocket handshake included, and
// every body has a JSON or NDJSON content type.
func TestTokenAndContentTypes(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][2]string{} // "METHOD path" -> Authorization, Content-Type
	srv, _ := startServer(t, runtime.Config{}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[r.Method+" "+r.URL.Path] = [2]string{r.Header.Get("Authorization"), r.Header.Get("Content-Type")}
			mu.Unlock()
			h.ServeHTTP(w, r)
		})
	})
	c := newClient(t, srv.http.URL, client.Config{Token: "s3cret"})
	ctx := t.Context()
	putJob(t, c, 0)
	if _, err := c.PostEvents(ctx, "mail", events(0, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Predict(ctx, "spam", map[string]any{"key": "a", "features": map[string]any{"x": 1}}); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	mu.Lock()
	defer mu.Unlock()
	for req, want := range map[string][2]string{
		"PUT /v1/jobs/spam":            {"Bearer s3cret", "application/json"},
		"POST /v1/streams/mail/events": {"Bearer s3cret", "application/x-ndjson"},
		"POST /v1/jobs/spam/predict":   {"Bearer s3cret", "application/x-ndjson"},
		"GET /v1/ws":                   {"Bearer s3cret", ""},
	} {
		if got, ok := seen[req]; !ok || got != want {
			t.Errorf("%s: Authorization, Content-Type = %q, want %q", req, got, want)
		}
	}
}

// A Sender batches events by count, retries batches refused with 429 whole,
// reports a batch refused as bad and goes on, and delivers every other
// event exactly once.
func TestSenderBatchesRetriesAndReports(t *testing.T) {
	srv, _ := startServer(t, runtime.Config{IngestWait: 20 * time.Millisecond}, nil)
	c := newClient(t, srv.http.URL, client.Config{})
	putJob(t, c, 120)
	job, _ := srv.engine.Job("spam")
	job.Pause()
	var mu sync.Mutex
	var refused []client.Result
	batches := 0
	s := c.NewSender(t.Context(), "mail", client.SenderConfig{
		MaxEvents: 50, Concurrency: 1,
		OnRetry: func(b *client.Batch, r client.Retry) { job.Resume() },
		OnResult: func(r client.Result) {
			mu.Lock()
			defer mu.Unlock()
			batches++
			if r.Err != nil {
				refused = append(refused, r)
			}
		},
	})
	lines := strings.Split(strings.TrimSpace(string(events(0, 300))), "\n")
	for i, l := range lines {
		if i == 160 {
			l = `{"key":"bad","label":"maybe"}`
		}
		if err := s.AddRaw([]byte(l), int64(1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Added != 300 || st.Sent != 300 || st.Accepted != 250 || st.Refused != 50 || st.Retries429 == 0 || st.RetriesErr != 0 {
		t.Errorf("stats %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if batches != 6 || len(refused) != 1 {
		t.Fatalf("%d batches, %d refused", batches, len(refused))
	}
	r := refused[0]
	if r.Err.Line != 11 || r.Err.Field != "label" || r.Batch.Len() != 50 || r.Batch.Tags[r.Err.Line-1] != 1160 {
		t.Errorf("refused batch: %+v, tags %v...", r.Err, r.Batch.Tags[:3])
	}
	waitFor(t, "every accepted event processed", 10*time.Second, func() bool { return job.Status(false).Processed == 250 })
}

// A Sender stops at a refusal that would refuse every batch, and says
// which.
func TestSenderStopsOnUnknownStream(t *testing.T) {
	srv, _ := startServer(t, runtime.Config{}, nil)
	c := newClient(t, srv.http.URL, client.Config{})
	s := c.NewSender(t.Context(), "nowhere", client.SenderConfig{MaxEvents: 10})
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		err = s.Add(map[string]any{"key": i})
	}
	cerr := s.Close()
	var se *client.SendError
	var e *client.Error
	if !errors.As(cerr, &se) || !errors.As(cerr, &e) || e.Status != 404 || se.Batch.Len() != 10 {
		t.Fatalf("Close: %#v", cerr)
	}
	if err == nil {
		t.Error("Add went on after the Sender stopped")
	}
	if st := s.Stats(); st.Accepted != 0 || st.Sent != 0 {
		t.Errorf("stats %+v", st)
	}
}

// FlushAfter sends a batch that is not full: a trickle of events arrives.
func TestSenderFlushAfter(t *testing.T) {
	srv, _ := startServer(t, runtime.Config{}, nil)
	c := newClient(t, srv.http.URL, client.Config{})
	putJob(t, c, 0)
	s := c.NewSender(t.Context(), "mail", client.SenderConfig{FlushAfter: 10 * time.Millisecond})
	defer s.Close()
	if err := s.Add(map[string]any{"key": "one", "label": 1, "features": map[string]any{"x": 1}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lone event sent", 5*time.Second, func() bool { return s.Stats().Accepted == 1 })
}

func TestNewRejectsBadURL(t *testing.T) {
	for _, u := range []string{"localhost:8080", "ftp://x", "http://"} {
		if _, err := client.New(u, client.Config{}); err == nil {
			t.Errorf("%q accepted", u)
		}
	}
}

// A server that comes up while a call retries takes the retried request:
// connection errors are retried until it is there.
func TestRetriesUntilServerIsBack(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var once sync.Once
	c := newClient(t, "http://"+addr, client.Config{
		Retry: client.RetryPolicy{Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond},
		OnRetry: func(r client.Retry) {
			if r.Attempt < 3 {
				return
			}
			once.Do(func() { // the server starts on the address after two failed retries
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					t.Errorf("listening again on %s: %v", addr, err)
					return
				}
				srv, _ := startServer(t, runtime.Config{}, nil)
				srv.http.Close()
				back := &http.Server{Handler: srv.http.Config.Handler}
				go back.Serve(ln)
				t.Cleanup(func() { back.Close() })
			})
		},
	})
	if err := c.Healthz(t.Context()); err == nil {
		t.Fatal("Healthz of a dead server succeeded")
	}
	if _, err := c.Jobs(t.Context()); err != nil {
		t.Fatalf("Jobs once the server is back: %v", err)
	}
}

// The typed accessors decode each kind of feed message the server sends:
// stats, topk, distinct and backup while it runs, and recovery after a
// restart on the same data directory.
func TestFeedMessagesDecode(t *testing.T) {
	dir := t.TempDir()
	start := func() (*client.Client, func()) {
		store, err := ft.NewDirStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		srv, stop := startServer(t, runtime.Config{Store: store, DataDir: dir}, nil)
		c := newClient(t, srv.http.URL, client.Config{})
		for _, spec := range []client.JobSpec{
			{Name: "words", Kind: "heavy_hitters", Input: "mail", Params: map[string]any{"field": "features"}, FT: map[string]any{"max_divergence": 1}},
			{Name: "users", Kind: "distinct", Input: "mail", Params: map[string]any{"field": "key"}},
		} {
			if _, err := c.PutJob(t.Context(), spec); err != nil {
				t.Fatal(err)
			}
		}
		return c, stop
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c, stop := start()
	sub, err := c.Subscribe(ctx, client.SubscribeOptions{Types: []string{client.TypeStats, client.TypeTopK, client.TypeDistinct, client.TypeBackup}, WaitSubscribed: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PostEvents(ctx, "mail", events(0, 40)); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < 4 {
		m, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %v: %v", seen, err)
		}
		switch m.Type {
		case client.TypeStats:
			s, err := m.Stats()
			seen[m.Type] = err == nil && s.Stats.Name == m.Job && len(s.Stats.Raw) > 0
		case client.TypeTopK:
			top, err := m.TopK()
			seen[m.Type] = err == nil && len(top.Items) > 0 && top.Items[0].Upper >= top.Items[0].Estimate
		case client.TypeDistinct:
			d, err := m.Distinct()
			seen[m.Type] = err == nil && d.Estimate > 0
		case client.TypeBackup:
			b, err := m.Backup()
			seen[m.Type] = err == nil && b.Index > 0 && len(b.LastSeqs) > 0
		}
		if !seen[m.Type] {
			t.Fatalf("did not decode: %s", m.Raw)
		}
	}
	sub.Close()
	stop()

	c, _ = start()
	sub, err = c.Subscribe(ctx, client.SubscribeOptions{Jobs: []string{"users"}, Types: []string{client.TypeRecovery}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	m, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Recovery()
	if err != nil || r.Job != "users" || !r.Clean || r.Lost != 0 || r.Backups == 0 || len(r.Raw) == 0 {
		t.Fatalf("recovery %+v, %v: %s", r, err, m.Raw)
	}
}

// Rescale changes a running job's partition count through the real
// server; the status shows the rescale, and a count out of range is a
// 400 naming the field.
func TestRescale(t *testing.T) {
	srv, _ := startServer(t, runtime.Config{}, nil)
	c := newClient(t, srv.http.URL, client.Config{})
	spec := client.JobSpec{Name: "top", Kind: "heavy_hitters", Input: "clicks", Partitions: 2, Params: map[string]any{"field": "item"}}
	if _, err := c.PutJob(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PostEvents(t.Context(), "clicks", []byte("{\"item\":\"a\"}\n{\"item\":\"a\"}\n{\"item\":\"b\"}\n")); err != nil {
		t.Fatal(err)
	}
	st, err := c.Rescale(t.Context(), "top", 5)
	if err != nil {
		t.Fatal(err)
	}
	if st.Elastic == nil || st.Elastic.Partitions != 5 || st.Elastic.Rescales != 1 || len(st.Elastic.Last) != 1 ||
		st.Elastic.Last[0].From != 2 || st.Elastic.Last[0].To != 5 || st.Elastic.Last[0].Reason != "api" {
		t.Fatalf("after the rescale: %+v", st.Elastic)
	}
	waitFor(t, "the three events counted", 5*time.Second, func() bool {
		st, err := c.Job(t.Context(), "top")
		return err == nil && st.TopK != nil && st.TopK.Total == 3
	})
	_, err = c.Rescale(t.Context(), "top", 0)
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || apiErr.Field != "partitions" {
		t.Fatalf("a rescale to 0 partitions: %v", err)
	}
}
