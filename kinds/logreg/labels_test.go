package logreg

import (
	"bytes"
	"slices"
	"testing"

	"github.com/mlstream/mlstream/learners"
)

// pendingJob is a job of parts partitions with only what delayed labels
// and their backups use.
func pendingJob(parts int) *logregJob {
	j := &logregJob{labels: labelParams{ttl: 1000, bytes: 1 << 20}, nparts: parts}
	for i := range parts {
		p := &logregPart{job: j, index: i, pend: j.newPending()}
		p.pend.journaled = true
		j.parts = append(j.parts, p)
		j.committed = append(j.committed, newCommittedPending())
	}
	return j
}

func pendingIDs(s *pendingSet) []string {
	var ids []string
	for id := range s.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

var feats = []learners.Feature{{Hash: 1, Value: 2}}

// A full backup then a delta restore the pending sets as of the last
// merge: changes not yet merged are not in a backup (the model does not
// hold their events either).
func TestPendingBackupChain(t *testing.T) {
	j := pendingJob(2)
	p0, p1 := j.parts[0], j.parts[1]
	for _, id := range []string{"a", "b", "c"} {
		p0.pend.hold(id, 10, 0.25, feats)
	}
	p1.pend.hold("z", 10, 0.5, feats)
	p0.commitPending()
	p1.commitPending()
	var full, delta bytes.Buffer
	if err := j.backupPending(&full, true); err != nil {
		t.Fatal(err)
	}
	if e := p0.pend.take("a", 20); e == nil || e.prob != 0.25 {
		t.Fatalf("take a: %+v", e)
	}
	p0.pend.hold("d", 30, 0.75, feats)
	p0.commitPending()
	p0.pend.hold("unmerged", 40, 0.75, feats)
	if err := j.backupPending(&delta, false); err != nil {
		t.Fatal(err)
	}
	if delta.Bytes()[1] != pendingChanges {
		t.Fatal("the second backup is not a delta")
	}

	r := pendingJob(2)
	for _, b := range [][]byte{full.Bytes(), delta.Bytes()} {
		if err := r.recoverPending(bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	r.restorePending()
	if got := pendingIDs(r.parts[0].pend); !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Fatalf("partition 0 restored %v", got)
	}
	if got := pendingIDs(r.parts[1].pend); !slices.Equal(got, []string{"z"}) {
		t.Fatalf("partition 1 restored %v", got)
	}
	if c := r.parts[0].pend.counts; c.Held != 4 || c.Joined != 1 {
		t.Fatalf("counts %+v", c)
	}
	if e := r.parts[0].pend.take("d", 40); e == nil || e.prob != 0.75 || !slices.Equal(e.feats, feats) {
		t.Fatalf("restored d: %+v", e)
	}
	// The restored FIFO still expires oldest first.
	r.parts[0].pend.advance(1020)
	if c := r.parts[0].pend.counts; c.Expired != 2 || len(r.parts[0].pend.live) != 0 {
		t.Fatalf("expiry after restore: %+v, %v", c, pendingIDs(r.parts[0].pend))
	}
}

// A damaged pending section is refused, never a panic or an allocation
// of what it announces.
func TestPendingBackupDamaged(t *testing.T) {
	j := pendingJob(1)
	j.parts[0].pend.hold("a", 1, 0.5, feats)
	j.parts[0].commitPending()
	var b bytes.Buffer
	if err := j.backupPending(&b, true); err != nil {
		t.Fatal(err)
	}
	data := b.Bytes()
	for n := 1; n < len(data); n++ {
		if err := pendingJob(1).recoverPending(bytes.NewReader(data[:n])); err == nil {
			t.Errorf("a section cut at %d bytes of %d was taken", n, len(data))
		}
	}
	huge := append([]byte{pendingSection, pendingFull, 1, 0, 0, 0, 0, 0, 0}, 0xff, 0xff, 0xff, 0xff, 0x0f)
	if err := pendingJob(1).recoverPending(bytes.NewReader(huge)); err == nil {
		t.Error("an announced count without its bytes was taken")
	}
	if err := pendingJob(2).recoverPending(bytes.NewReader(data)); err == nil {
		t.Error("a section of another partition count was taken")
	}
}
