package main

import (
	"context"
	enc "encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mlstream/mlstream/cluster/natsnode"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// logDeltas logs every message of every job's delta stream, read from the
// first node whose NATS server answers: for a test that failed on a
// model's count, which partition's deltas claimed events (their Mls-Rec)
// without holding their updates, or held them twice, and which owner
// wrote them. A logreg delta starts with its format byte, then its
// partition, last sequence and labelled events as uvarints.
func (c *testCluster) logDeltas() {
	c.t.Helper()
	for _, addr := range c.clients {
		nc, err := nats.Connect("nats://"+addr, nats.Timeout(2*time.Second),
			nats.UserInfo(natsnode.AdminUser, natsnode.Password(c.secret, natsnode.AdminUser)))
		if err != nil {
			continue
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		names := js.StreamNames(ctx)
		for name := range names.Name() {
			if strings.HasPrefix(name, "MLS_DELTA_") {
				c.logDeltaStream(ctx, js, name)
			}
		}
		if names.Err() == nil {
			return
		}
		c.t.Logf("delta streams at %s: %v", addr, names.Err())
	}
}

func (c *testCluster) logDeltaStream(ctx context.Context, js jetstream.JetStream, name string) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		c.t.Logf("delta stream %s: %v", name, err)
		return
	}
	info := st.CachedInfo()
	var b, odd strings.Builder
	labelled := map[string]uint64{}
	prev := map[string]uint64{} // by partition, the Mls-Rec of its last message
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			fmt.Fprintf(&b, "%d: %v\n", seq, err)
			continue
		}
		p := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		fmt.Fprintf(&b, "%d p%s token=%s node=%s rec=%s resume=%s skip=%s", seq, p, m.Header.Get("Mls-Token"),
			m.Header.Get("Mls-Node"), m.Header.Get("Mls-Rec"), m.Header.Get("Mls-Resume"), m.Header.Get("Mls-Skip"))
		if mk := m.Header.Get("Mls-Marker"); mk != "" {
			fmt.Fprintf(&b, " marker=%s released=%s", mk, m.Header.Get("Mls-Released"))
		}
		if fields, ok := deltaLead(m.Data); ok {
			// Where every event is labelled, a delta holds exactly the
			// events after the subject's previous message.
			since := int64(fields[1]) - int64(prev[p])
			fmt.Fprintf(&b, " delta: last_seq=%d labelled=%d since_previous=%d", fields[1], fields[2], since)
			if since != int64(fields[2]) {
				fmt.Fprintf(&odd, "%d p%s: labelled %d, %d events after the previous message\n", seq, p, fields[2], since)
			}
			labelled[p] += fields[2]
		}
		b.WriteByte('\n')
		if rec, err := strconv.ParseUint(m.Header.Get("Mls-Rec"), 10, 64); err == nil {
			prev[p] = rec
		}
	}
	c.t.Logf("delta stream %s (messages %d-%d), labelled events by partition %v; deltas not holding the events after their subject's previous message:\n%s\nevery message:\n%s", name,
		info.State.FirstSeq, info.State.LastSeq, labelled, odd.String(), b.String())
}

// deltaLead reads a logreg delta's partition, last sequence and labelled
// events.
func deltaLead(data []byte) (fields [3]uint64, ok bool) {
	if len(data) == 0 {
		return fields, false
	}
	rest := data[1:]
	for i := range fields {
		v, n := enc.Uvarint(rest)
		if n <= 0 {
			return fields, false
		}
		fields[i], rest = v, rest[n:]
	}
	return fields, true
}
