package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/internal/gen"
	"github.com/nats-io/nats.go/jetstream"
)

// A partition whose delta could not be stored (its stream refused it, not
// a newer owner) while its node keeps the partition starts its run over
// from its last delta stored, so the events the lost delta held are
// learned again: the model ends with every event once. (It used to drop
// the partition's events for good, waiting for a replay that only a new
// owner makes.) The delta stream is made to refuse writes for a while by
// a limit on its messages.
func TestClusterDeltaRefusedIsLearnedAgain(t *testing.T) {
	url, nodes := startExternalPairWith(t, strings.Replace(spamSpec, `"partitions":6`, `"partitions":4`, 1))
	u0, u1 := nodes[0].url(), nodes[1].url()
	g := gen.New(gen.Config{Seed: 3})
	post := func(n int) {
		var body []byte
		for range n {
			ev := g.Next()
			body = append(ev.AppendJSON(body), '\n')
		}
		mustPostRetrying(t, u0, "mail", body)
	}
	type status struct {
		Model  struct{ Updates int64 }
		Deltas struct {
			SendErrors int64 `json:"send_errors"`
			Dropped    int64 `json:"dropped_events"`
		}
	}
	learned := func(want int64) {
		t.Helper()
		for _, u := range []string{u0, u1} {
			waitUntil(t, 60*time.Second, fmt.Sprintf("%s's model holding %d updates", u, want), func() bool {
				var st status
				getJob(t, u, "spam", &st)
				if st.Model.Updates > want {
					t.Fatalf("%s's model holds %d updates, more than the %d events posted", u, st.Model.Updates, want)
				}
				return st.Model.Updates == want
			})
		}
	}
	post(3000)
	learned(3000)

	_, js := jetStreamAt(t, url)
	var deltas jetstream.Stream
	var err error
	names := js.StreamNames(t.Context())
	for n := range names.Name() {
		if strings.HasPrefix(n, "MLS_DELTA_spam_") {
			if deltas, err = js.Stream(t.Context(), n); err != nil {
				t.Fatal(err)
			}
		}
	}
	if deltas == nil {
		t.Fatal("no delta stream of job spam")
	}
	info, err := deltas.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	full, open := info.Config, info.Config
	full.MaxMsgs, full.Discard = int64(info.State.Msgs), jetstream.DiscardNew
	if _, err := js.UpdateStream(t.Context(), full); err != nil {
		t.Fatal(err)
	}
	post(3000)
	waitUntil(t, 30*time.Second, "a delta refused", func() bool {
		var a, b status
		getJob(t, u0, "spam", &a)
		getJob(t, u1, "spam", &b)
		return a.Deltas.SendErrors+b.Deltas.SendErrors > 0
	})
	if _, err := js.UpdateStream(t.Context(), open); err != nil {
		t.Fatal(err)
	}
	post(3000)
	learned(9000)
	if a, b := clusterStatusAt(t, u0).Counts, clusterStatusAt(t, u1).Counts; a.RunRestarts+b.RunRestarts == 0 {
		t.Fatal("no run started over after its delta was refused (counts run_restarts)")
	}
	for _, u := range []string{u0, u1} {
		var st status
		getJob(t, u, "spam", &st)
		t.Logf("%s: %d updates, %d delta sends refused, %d events dropped until learned again", u, st.Model.Updates, st.Deltas.SendErrors, st.Deltas.Dropped)
	}
}
