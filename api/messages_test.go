package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/runtime"
)

// Every message type of the feed, the engine's and the four kinds', is
// provoked on a real server, read over a real WebSocket, decoded with the
// client's typed decoders and checked field by field, ts included. The
// recovery message, sent live when a job recovers and again to each new
// subscriber, says the same both times.
func TestEveryMessageTypeDecodes(t *testing.T) {
	dir := t.TempDir()
	n1 := startNode(t, dir, nil, &syncBuffer{})
	n1.putJob("lr", `{"kind":"logreg","input":"s","partitions":1}`)
	n1.putJob("hh", `{"kind":"heavy_hitters","input":"s","partitions":1,"params":{"field":"u","window":"1s"}}`)
	n1.putJob("dc", `{"kind":"distinct","input":"s","partitions":1,"params":{"field":"u"}}`)
	n1.putJob("jn", `{"kind":"join","left":"l","right":"r","partitions":1,"params":{"on":"k","within":"10s"}}`)
	// drift is not provoked here (it takes thousands of events): see
	// TestLogregDriftReported; failover takes a cluster: see
	// TestClusterKill9LosesNothingAcknowledged; rescale is read over
	// a WebSocket in TestPatchRescalesAJob.
	if got := runtime.OutputTypes(); len(got) != 11 {
		t.Fatalf("output types %v", got)
	}

	c, err := client.New(n1.http.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub, err := c.Subscribe(ctx, client.SubscribeOptions{WaitSubscribed: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	const ts0 int64 = 1_700_000_000_000
	// A labelled event for logreg; u for the synopses (the second closes
	// hh's first 1s window: a backup); a pair for the join.
	for _, p := range []struct{ stream, body string }{
		{"s", fmt.Sprintf(`{"key":"e1","ts":%d,"label":1,"features":{"x":1},"u":"a"}`, ts0)},
		{"s", fmt.Sprintf(`{"key":"e2","ts":%d,"label":0,"features":{"x":2},"u":"b"}`, ts0+5000)},
		{"l", fmt.Sprintf(`{"k":"p","ts":%d}`, ts0)},
		{"r", fmt.Sprintf(`{"k":"p","ts":%d}`, ts0+2000)},
	} {
		if code, body := n1.post(p.stream, p.body+"\n"); code != http.StatusAccepted {
			t.Fatalf("post %s: %d %v", p.stream, code, body)
		}
	}

	checks := map[string]func(m client.Message) error{
		client.TypePrediction: func(m client.Message) error {
			p, err := m.Prediction()
			if err == nil && (m.Job != "lr" || p.Key != "e1" || m.TS != ts0 || p.TS != ts0 || p.Label == nil || *p.Label != 1 || p.P <= 0 || p.P >= 1 || p.Seq == 0) {
				err = fmt.Errorf("%+v", p)
			}
			return err
		},
		client.TypeStats: func(m client.Message) error {
			s, err := m.Stats()
			if err == nil && (s.Stats.Name != m.Job || !recent(m.TS)) {
				err = fmt.Errorf("%+v", s)
			}
			return err
		},
		client.TypeBackup: func(m client.Message) error {
			b, err := m.Backup()
			if err == nil && (m.Job != "hh" || !recent(m.TS) || b.Bytes <= 0 || len(b.Partitions) != 1 || b.Partition == nil || *b.Partition != 0) {
				err = fmt.Errorf("%+v", b)
			}
			return err
		},
		client.TypeTopK: func(m client.Message) error {
			tk, err := m.TopK()
			if err == nil && (m.Job != "hh" || tk.Job != "hh" || !recent(m.TS) || len(tk.Items) == 0 || tk.Total == 0) {
				err = fmt.Errorf("%+v", tk)
			}
			return err
		},
		client.TypeDistinct: func(m client.Message) error {
			d, err := m.Distinct()
			if err == nil && (m.Job != "dc" || d.Job != "dc" || !recent(m.TS) || d.Estimate != 2) {
				err = fmt.Errorf("%+v", d)
			}
			return err
		},
		client.TypeMatch: func(m client.Message) error {
			x, err := m.Match()
			if err == nil && (m.Job != "jn" || x.Key != "p" || x.LeftTS != ts0 || x.RightTS != ts0+2000 || m.TS != ts0+2000) {
				err = fmt.Errorf("%+v ts %d", x, m.TS)
			}
			return err
		},
		client.TypeJoin: func(m client.Message) error {
			j, err := m.Join()
			if err == nil && (m.Job != "jn" || j.Job != "jn" || !recent(m.TS) || j.Matches != 1) {
				err = fmt.Errorf("%+v", j)
			}
			return err
		},
	}
	// Announcements may come before the state they announce is complete:
	// a type is done at its first message that passes.
	for len(checks) > 0 {
		m, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %v: %v", keys(checks), err)
		}
		if check, ok := checks[m.Type]; ok && check(m) == nil {
			delete(checks, m.Type)
		}
	}
	sub.Close()
	n1.stop()

	// The recovery, live (on the hub, as the feed forwards it) and to a
	// new subscriber of the feed.
	n2 := newNode(t, dir, &syncBuffer{})
	live := n2.engine.Hub().Subscribe([]string{"hh"}, []string{runtime.TypeRecovery}, 10)
	if err := n2.engine.Start(nil); err != nil {
		t.Fatal(err)
	}
	var liveMsg client.Message
	select {
	case raw := <-live.C:
		liveMsg = decodeFeed(t, raw)
	case <-ctx.Done():
		t.Fatal("no live recovery message")
	}
	c2, _ := client.New(n2.http.URL, client.Config{})
	sub2, err := c2.Subscribe(ctx, client.SubscribeOptions{Jobs: []string{"hh"}, Types: []string{client.TypeRecovery}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Close()
	again, err := sub2.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []client.Message{liveMsg, again} {
		rep, err := m.Recovery()
		if err != nil || m.Job != "hh" || rep.Job != "hh" || !rep.Clean || rep.Backups == 0 || !recent(m.TS) || m.TS != rep.At.UnixMilli() {
			t.Fatalf("recovery message %s: %+v, %v", m.Raw, rep, err)
		}
	}
	if liveMsg.TS != again.TS {
		t.Fatalf("live recovery at %d, sent again at %d", liveMsg.TS, again.TS)
	}
}

// recent says ts is a time of the last minute, in epoch ms.
func recent(ts int64) bool {
	return time.Since(time.UnixMilli(ts)).Abs() < time.Minute
}

func decodeFeed(t *testing.T, raw []byte) client.Message {
	t.Helper()
	var m client.Message
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m.Raw = raw
	return m
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
