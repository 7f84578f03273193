package heavyhitters_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/mlstream/mlstream/ft"
	"github.com/mlstream/mlstream/runtime"
	"github.com/valyala/fastjson"
)

// sameItem is n events of one item: each moves the divergence by 1.
func sameItem(n int) []*fastjson.Value {
	var a fastjson.Arena
	out := make([]*fastjson.Value, n)
	for i := range out {
		o := a.NewObject()
		o.Set("item", a.NewString("x"))
		out[i] = o
	}
	return out
}

// waitBackups polls the job until it has stored n state backups (they are
// written after the events that called for them are processed) and returns
// how many it has.
func waitBackups(t *testing.T, j *runtime.Job, n int64) int64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b := j.Status(false).FT.Backups
		if b.Full+b.Delta >= n || time.Now().After(deadline) {
			return b.Full + b.Delta
		}
		time.Sleep(time.Millisecond)
	}
}

// waitProcessed polls the job until it has processed n events.
func waitProcessed(t *testing.T, j *runtime.Job, n uint64) runtime.JobStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := j.Status(false)
		if st.Processed >= n {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("processed %d of %d events", st.Processed, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A job's first full backups (one per partition) are stored when PutJob
// returns: its start pays for them and for its chain files, not its first
// events, and the failure count is stored before any event is taken.
func TestFirstBackupsStoredAtStart(t *testing.T) {
	e, j := newJob(t, 2, runtime.FTSpec{Mode: ft.ModeApprox})
	defer e.Close(context.Background())
	if b := j.Status(false).FT.Backups; b.Full != 2 || b.Delta != 0 || b.StoredCount != 2 {
		t.Fatalf("backups at start: %+v, want 2 full ones stored", b)
	}
}

// Backups on divergence hold to the event however few times the partition
// asks its unit: with Θ = 10 on one partition (θ = Θ/2 = 5) and one item,
// the divergence passes θ at every 6th event, and 1,200 events in requests
// of 100 make 200 state backups beside the job's first one.
func TestBackupOnDivergenceToTheEvent(t *testing.T) {
	e, j := newJob(t, 1, runtime.FTSpec{Mode: ft.ModeApprox, MaxDivergence: 10, MaxPending: 1 << 20, MaxUnacked: 1 << 20, CompactEvery: 1024})
	defer e.Close(context.Background())
	vs := sameItem(1200)
	for off := 0; off < len(vs); off += 100 {
		commit(t, e, vs[off:off+100])
	}
	waitProcessed(t, j, uint64(len(vs)))
	if got := waitBackups(t, j, 201); got != 201 {
		t.Fatalf("%d backups, want the first one and 200 on divergence", got)
	}
}

// Backups on events at risk too: with L = 200 on one partition (l = L/2 =
// 100) and Θ out of reach, requests of 40 events (too few to be logged)
// leave more than l at risk at the end of every third one: 10 backups for
// 30 requests beside the job's first one.
func TestBackupOnEventsAtRisk(t *testing.T) {
	e, j := newJob(t, 1, runtime.FTSpec{Mode: ft.ModeApprox, MaxDivergence: 1e15, MaxPending: 200, MaxUnacked: 1 << 20, CompactEvery: 1024})
	defer e.Close(context.Background())
	vs := zipfEvents(1200)
	for off := 0; off < len(vs); off += 40 {
		commit(t, e, vs[off:off+40])
		waitProcessed(t, j, uint64(off+40))
	}
	if got := waitBackups(t, j, 11); got != 11 {
		t.Fatalf("%d backups, want the first one and 10 on events at risk", got)
	}
	if logged := j.Status(false).FT.Partitions[0].Logged; logged != 0 {
		t.Fatalf("%d events logged", logged)
	}
}

// distinctItems is n events of n different items.
func distinctItems(n int) []*fastjson.Value {
	var a fastjson.Arena
	out := make([]*fastjson.Value, n)
	for i := range out {
		o := a.NewObject()
		o.Set("item", a.NewString("d"+strconv.Itoa(i)))
		out[i] = o
	}
	return out
}

// A chain is compacted by the bytes of its deltas as well as their count:
// small deltas on a large full backup make few full backups. 2,000 items
// fill the summary without a backup (no counter moves by more than 1),
// then 1,200 events of one item (θ = 5) make 200 backups. The first
// carries the 2,000 counters on top of the empty summary's full backup,
// which is compacted after 16 deltas (they are far larger than it); the
// next full one holds ~30 KB, and the deltas after it a counter or two
// each (~20 bytes), so they are compacted only by the cap on a chain's
// deltas (8 × compact_every = 128). Three full backups in all;
// compacting every 16 deltas made 12.
func TestCompactionFollowsDeltaBytes(t *testing.T) {
	e, j := newJob(t, 1, runtime.FTSpec{Mode: ft.ModeApprox, MaxDivergence: 10, MaxPending: 1 << 20, MaxUnacked: 1 << 20})
	defer e.Close(context.Background())
	fill := distinctItems(2000)
	for off := 0; off < len(fill); off += 100 {
		commit(t, e, fill[off:off+100])
	}
	vs := sameItem(1200)
	for off := 0; off < len(vs); off += 100 {
		commit(t, e, vs[off:off+100])
	}
	waitProcessed(t, j, uint64(len(fill)+len(vs)))
	if got := waitBackups(t, j, 201); got != 201 {
		t.Fatalf("%d backups, want the first one and 200 on divergence", got)
	}
	if b := j.Status(false).FT.Backups; b.Full != 3 {
		t.Fatalf("%d full backups and %d deltas, want 3 full ones", b.Full, b.Delta)
	}
}
