package cluster

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// stateNode is a node with what the state bucket's reads and writes use:
// an in-process nats-server with JetStream, the state bucket (history
// kept as the test says) and the object store.
func stateNode(t *testing.T, history uint8) *Node {
	t.Helper()
	s, err := server.NewServer(&server.Options{Port: -1, NoSigs: true, JetStream: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc.Close()
		s.Shutdown()
		s.WaitForShutdown()
	})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := &Node{cfg: Config{Node: "n1"}, nc: nc, js: js, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if n.state, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucketState, History: history}); err != nil {
		t.Fatal(err)
	}
	if n.objects, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bucketObjects}); err != nil {
		t.Fatal(err)
	}
	return n
}

// A state entry that does not decode (no header, a header that is not
// JSON, a state object that is gone) never blocks a take-over: fence
// restores the newest older backup the bucket keeps or, when there is
// none, nothing (the stream is replayed), says so, and fences the entry
// with the new token, which then decodes. Today fence fails, and the
// owner retries every 200 ms for ever.
func TestUndecodableBackupDoesNotBlockTakeOver(t *testing.T) {
	good := encodeState(stateHeader{Token: 3, Node: "n0", Rec: 70, Resume: 12, Bytes: 5}, []byte("state"))
	for _, c := range []struct {
		name    string
		bad     []byte
		history uint8
		older   bool // the older backup is kept, and restored
	}{
		{"no header", []byte("garbage without a header"), 1, false},
		{"header not JSON", []byte("{not json\nstate"), 1, false},
		{"object gone", encodeState(stateHeader{Token: 4, Node: "n0", Rec: 80, Object: "j.p0.4.gone"}, nil), 1, false},
		{"no header, older kept", []byte("garbage without a header"), 5, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := stateNode(t, c.history)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			key := stateKey("j_1", 0)
			if _, err := n.state.Put(ctx, key, good); err != nil {
				t.Fatal(err)
			}
			if _, err := n.state.Put(ctx, key, c.bad); err != nil {
				t.Fatal(err)
			}
			h, state, rev, err := n.store().fence(ctx, key, 5)
			if err != nil {
				t.Fatalf("fence: %v", err)
			}
			if !strings.Contains(h.damaged, "does not decode") {
				t.Fatalf("damage not reported: %q", h.damaged)
			}
			if c.older {
				if string(state) != "state" || h.Rec != 70 || h.Resume != 12 || !strings.Contains(h.damaged, "restored the older backup") {
					t.Fatalf("restored %q at rec %d resume %d: %s", state, h.Rec, h.Resume, h.damaged)
				}
			} else if state != nil || h.Rec != 0 || h.Resume != 0 || !strings.Contains(h.damaged, "replaying what the stream retains") {
				t.Fatalf("restored %q at rec %d resume %d: %s", state, h.Rec, h.Resume, h.damaged)
			}
			// The entry is the new owner's now, and decodes.
			e, err := n.store().latest(ctx, key)
			if err != nil || e.rev != rev {
				t.Fatalf("latest %v, %v (fence wrote revision %d)", e.rev, err, rev)
			}
			nh, _, err := decodeState(e.value)
			if err != nil || nh.Token != 5 || nh.Empty == c.older {
				t.Fatalf("entry after the take-over: %+v, %v", nh, err)
			}
		})
	}
}
