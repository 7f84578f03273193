package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/ft"
)

// ftEngine is an engine with a backup store in dir. A test "crashes" it
// by abandoning it without Close: nothing more is written once its
// partitions are idle or paused, which is what kill -9 leaves behind.
func ftEngine(t testing.TB, dir string) *Engine {
	t.Helper()
	store, err := ft.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return NewEngine(Config{Partitions: 1, Store: store, DataDir: dir, IngestWait: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

func ftJobSpec(mode string, pending int) Spec {
	return Spec{Name: "j", Kind: "logreg", Input: "s", Partitions: 1, Params: map[string]any{"hash_bits": 10},
		FT: FTSpec{Mode: mode, MaxDivergence: 1000, MaxPending: pending, MaxUnacked: 1000}}
}

// twoPartitionJob runs ftJobSpec over two partitions in an engine over a
// new data directory, once its first full backup is written.
func twoPartitionJob(t *testing.T, mode string, pending int) (dir string, spec Spec, e *Engine, j *Job) {
	t.Helper()
	dir = t.TempDir()
	spec = ftJobSpec(mode, pending)
	spec.Partitions = 2
	e = ftEngine(t, dir)
	j = mustPut(t, e, spec)
	waitFullBackup(t, j)
	return dir, spec, e, j
}

func events(n, from int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`{"key":"k%d","label":%d,"features":{"x":%d}}`, from+i, (from+i)%2, (from+i)%7)
	}
	return out
}

func waitIdle(t *testing.T, j *Job) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for j.depth() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("queue did not drain")
		}
		time.Sleep(time.Millisecond)
	}
}

// AF-Stream's item backup rule: events pending in a queue are written to
// the item log only once more than l of them wait; fewer are at risk.
func TestPendingEventsAreLoggedPastL(t *testing.T) {
	// L = 40 with one partition: l = L/2 = 20.
	for _, c := range []struct {
		name     string
		requests int
		wantLost int64
	}{
		{"below l: at risk", 3, 15}, // 15 pending <= 20: no item backup
		{"past l: logged", 5, 0},    // the 5th request makes 25 > 20: all are logged
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			e := ftEngine(t, dir)
			j := mustPut(t, e, ftJobSpec(ft.ModeApprox, 40))
			j.Pause()
			for r := range c.requests {
				if _, err := ingest(e, "s", events(5, 5*r)...); err != nil {
					t.Fatal(err)
				}
			}
			// Crash with everything still queued.
			e2 := ftEngine(t, dir)
			defer e2.Close(context.Background())
			j2 := mustPut(t, e2, ftJobSpec(ft.ModeApprox, 40))
			rep := j2.Recovery()
			if rep == nil || rep.Lost != c.wantLost || rep.Failures != 1 || !rep.Within {
				t.Fatalf("recovery %+v, want lost %d", rep, c.wantLost)
			}
			if c.wantLost > 0 && (len(rep.LostRanges[0]) != 1 || rep.LostRanges[0][0] != [2]uint64{1, 15}) {
				t.Fatalf("lost ranges %v", rep.LostRanges)
			}
			if b, _ := json.Marshal(rep.LostRanges); c.wantLost == 0 && string(b) != "[[]]" {
				t.Fatalf("lost_ranges %s, want [[]] (a partition with nothing lost lists no range, not null)", b)
			}
			waitIdle(t, j2)
			if got := sec(j2.Status(false)).Metrics.All.Count; got != int64(5*c.requests)-c.wantLost {
				t.Fatalf("learned %d events", got)
			}
		})
	}
}

// Exact mode: what was accepted survives a crash at any point, and new
// events continue the sequence numbers.
func TestExactModeLosesNothing(t *testing.T) {
	dir := t.TempDir()
	e := ftEngine(t, dir)
	j := mustPut(t, e, ftJobSpec(ft.ModeExact, 1000))
	if _, err := ingest(e, "s", events(30, 0)...); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, j)
	j.Pause()
	if _, err := ingest(e, "s", events(20, 30)...); err != nil {
		t.Fatal(err)
	}
	e2 := ftEngine(t, dir)
	defer e2.Close(context.Background())
	j2 := mustPut(t, e2, ftJobSpec(ft.ModeExact, 1000))
	if rep := j2.Recovery(); rep == nil || rep.Lost != 0 || rep.Replayed == 0 {
		t.Fatalf("recovery %+v", rep)
	}
	if _, err := ingest(e2, "s", events(10, 50)...); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, j2)
	// The metrics are published when the partition goes idle, just after
	// its queue drains.
	deadline := time.Now().Add(5 * time.Second)
	st := j2.Status(false)
	for sec(st).Metrics.All.Count != 60 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		st = j2.Status(false)
	}
	if sec(st).Metrics.All.Count != 60 || st.Partitions[0].LastSeq != 60 {
		t.Fatalf("learned %d, last seq %d", sec(st).Metrics.All.Count, st.Partitions[0].LastSeq)
	}
}

// A spec whose kind cannot back up is refused with a field error, and so
// are bad bounds.
func TestFTSpecErrors(t *testing.T) {
	e := ftEngine(t, t.TempDir())
	defer e.Close(context.Background())
	for _, c := range []struct {
		ft    FTSpec
		field string
	}{
		{FTSpec{Mode: "always"}, "ft.mode"},
		{FTSpec{MaxDivergence: -1}, "ft.max_divergence"},
		{FTSpec{MaxPending: -5}, "ft.max_pending"},
		{FTSpec{CompactEvery: -1}, "ft.compact_every"},
	} {
		s := ftJobSpec("", 0)
		s.FT = c.ft
		_, err := e.PutJob(s)
		se, ok := err.(*SpecError)
		if !ok || se.Field != c.field {
			t.Errorf("%+v: %v, want field %s", c.ft, err, c.field)
		}
	}
}

// Windowed heavy hitters: windows close at their event-time boundaries,
// late events go to their window and are counted, too-late ones are
// counted as dropped, and every window end is backed up.
func TestWindowedHeavyHitters(t *testing.T) {
	e := ftEngine(t, t.TempDir())
	defer e.Close(context.Background())
	spec := Spec{Name: "hh", Kind: "heavy_hitters", Input: "s", Partitions: 1,
		Params: map[string]any{"field": "item", "k": 5, "counters": 50, "window": "1s", "keep": 1}}
	j := mustPut(t, e, spec)
	ev := func(item string, ts int) string { return fmt.Sprintf(`{"item":%q,"ts":%d}`, item, ts) }
	for _, batch := range [][]string{
		{ev("a", 100), ev("a", 200), ev("b", 900)}, // window 0
		{ev("c", 1100)}, // opens window 1, closes 0
		{ev("a", 500)},  // late: window 0 is kept
		{ev("d", 2500)}, // opens window 2, closes 1; window 0 leaves
		{ev("z", 300)},  // older than every kept window: dropped
	} {
		if _, err := ingest(e, "s", batch...); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, j)
	}
	var cur, last TopK
	var backups BackupStats
	waitFor := func(cond func() bool) {
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("current %+v, last %+v, backups %+v", cur, last, backups)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor(func() bool {
		cur, _ = j.TopK(WindowCurrent, 5)
		last, _ = j.TopK(WindowLast, 5)
		return cur.Total == 1 && last.Total == 1 && cur.Late == 1 && cur.Dropped == 1
	})
	if cur.Items[0].Key != "d" || cur.Start != 2000 || cur.End != 3000 || last.Items[0].Key != "c" {
		t.Fatalf("current %+v, last %+v", cur, last)
	}
	// Two window ends and the first window's start, each backed up (written
	// by the backup goroutine, so polled).
	waitFor(func() bool {
		backups = j.Status(false).FT.Backups
		return backups.Delta+backups.Full >= 3
	})
}

// fileDamages are the ways a small file is found damaged: a flipped byte, a
// torn tail, nothing at all.
var fileDamages = []struct {
	name string
	fn   func([]byte) []byte
}{
	{"flipped", func(b []byte) []byte { b = bytes.Clone(b); b[len(b)/2] ^= 0x40; return b }},
	{"truncated", func(b []byte) []byte { return b[:len(b)-3] }},
	{"empty", func([]byte) []byte { return nil }},
}

func damageFile(t *testing.T, path string, fn func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, fn(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitCount polls until the job has learned n events.
func waitCount(t *testing.T, j *Job, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for sec(j.Status(false)).Metrics.All.Count != n {
		if time.Now().After(deadline) {
			t.Fatalf("learned %d events, want %d", sec(j.Status(false)).Metrics.All.Count, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitFullBackup waits for the job's full backup at its start to be
// written, so that a crash after it leaves no backup half-written by an
// engine the test abandoned (a real crash ends its writes; an abandoned
// engine's would race with the next one's).
func waitFullBackup(t *testing.T, j *Job) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for j.Status(false).FT.Backups.Full == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no backup: %+v", j.Status(false).FT.Backups)
		}
		time.Sleep(time.Millisecond)
	}
}

// crashAfterRecovery leaves dir as a job that crashed, recovered, and then
// crashed again with 10 events queued and not logged (or, graceful, was
// stopped): there is a recovery history, a sequence mark past what the
// item log holds (or a clean marker). 30 events are in its backups.
func crashAfterRecovery(t *testing.T, dir string, spec Spec, graceful bool) {
	t.Helper()
	e := ftEngine(t, dir)
	j := mustPut(t, e, spec)
	waitFullBackup(t, j)
	j.Pause()
	// 30 > l = 20 events pending: all in the item log.
	if _, err := ingest(e, "s", events(30, 0)...); err != nil {
		t.Fatal(err)
	}
	e1 := ftEngine(t, dir) // the crash: e is abandoned
	j1 := mustPut(t, e1, spec)
	if rep := j1.Recovery(); rep == nil || rep.Replayed != 30 || rep.Lost != 0 {
		t.Fatalf("first recovery %+v", rep)
	}
	waitCount(t, j1, 30)
	waitFullBackup(t, j1)
	if graceful {
		if err := e1.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		return
	}
	// 10 pending, not above l = 10 after the first failure: at risk.
	j1.Pause()
	if _, err := ingest(e1, "s", events(10, 30)...); err != nil {
		t.Fatal(err)
	}
}

// Every metadata file the runtime keeps beside the backups (the sequence
// mark, the clean-shutdown marker, the recovery history), flipped,
// truncated or emptied: the job starts, restores what it can, reports the
// damage and a loss that is not negative, and takes and learns new events.
func TestDamagedMetadataIsSurvived(t *testing.T) {
	for _, file := range []struct {
		name     string
		path     string // under the data directory
		graceful bool   // stop gracefully (else crash) before the damage
		lost     int64  // events lost with the file damaged
		skipped  string // what the report's Skipped must mention
	}{
		// The 10 events queued at the crash cannot be counted without the
		// mark: the loss is not measured, and the report says why.
		{"sequence mark", "j/0/seq", false, 0, "seq"},
		// A damaged marker is a crash: a failure is counted.
		{"clean marker", "j/" + ft.CleanMarker, true, 0, ft.CleanMarker},
		{"recovery history", "j/" + ft.RecoveryHistory, false, 10, "recovery history"},
		// Rebuilt from the backups, which name the job's incarnation.
		{"incarnation", "j/" + ft.IncarnationFile, false, 10, ""},
	} {
		for _, d := range fileDamages {
			t.Run(file.name+"/"+d.name, func(t *testing.T) {
				dir := t.TempDir()
				spec := ftJobSpec(ft.ModeApprox, 40) // l = 20, then 10
				crashAfterRecovery(t, dir, spec, file.graceful)
				damageFile(t, filepath.Join(dir, file.path), d.fn)
				damaged, _ := os.ReadFile(filepath.Join(dir, file.path))

				e2 := ftEngine(t, dir)
				defer e2.Close(context.Background())
				j2 := mustPut(t, e2, spec)
				rep := j2.Recovery()
				failures, clean, skipped := 2, false, file.skipped
				if file.name == "clean marker" && d.name == "empty" {
					// The earlier version's marker is an empty file.
					failures, clean, skipped = 1, true, ""
				}
				if rep == nil || rep.Lost != file.lost || rep.Clean != clean || rep.Failures != failures {
					t.Fatalf("recovery %+v, want lost %d, clean %t, failures %d", rep, file.lost, clean, failures)
				}
				if got := strings.Join(rep.Skipped, "; "); !strings.Contains(got, skipped) || skipped == "" && got != "" {
					t.Fatalf("skipped %q, want the damaged %s reported", got, file.name)
				}
				// Nothing damaged is deleted: the damaged file is rebuilt, or
				// a copy of it, as it was found, is in the quarantine.
				switch {
				case file.name == "incarnation":
					if len(rep.Repaired) != 1 || len(rep.Quarantined) != 0 {
						t.Fatalf("repaired %q, quarantined %q", rep.Repaired, rep.Quarantined)
					}
				case skipped != "":
					assertQuarantinedCopy(t, rep, dir, file.path, damaged)
				}
				// The state was restored, and new events are taken.
				waitCount(t, j2, 30)
				if _, err := ingest(e2, "s", events(5, 40)...); err != nil {
					t.Fatalf("ingest after the recovery: %v", err)
				}
				waitCount(t, j2, 35)
				if h := j2.Status(false).FT.Recoveries; len(h) == 0 {
					t.Fatal("no recovery history")
				}
			})
		}
	}
}

// assertQuarantinedCopy checks that the recovery report names a folder of
// the quarantine holding a copy of the data directory's file path (under
// the job's directory), with the bytes it was found with.
func assertQuarantinedCopy(t *testing.T, rep *RecoveryReport, dir, path string, found []byte) {
	t.Helper()
	if len(rep.Quarantined) != 1 {
		t.Fatalf("quarantined %q, want one folder", rep.Quarantined)
	}
	folder, _, _ := strings.Cut(rep.Quarantined[0], ": ")
	if filepath.Dir(folder) != filepath.Join(dir, ft.QuarantineDir) {
		t.Fatalf("quarantine folder %s not in %s", folder, ft.QuarantineDir)
	}
	_, rel, _ := strings.Cut(path, "/") // the job's directory is the folder
	got, err := os.ReadFile(filepath.Join(folder, rel))
	if err != nil || !bytes.Equal(got, found) {
		t.Fatalf("quarantined copy of %s: %q, %v; want %q", path, got, err, found)
	}
}

// A damaged backup chain is passed over (the one before it is used) and a
// copy of it is in the quarantine: the backup that replaces it may reuse
// its file.
func TestDamagedChainIsCopiedToTheQuarantine(t *testing.T) {
	dir := t.TempDir()
	spec := ftJobSpec(ft.ModeApprox, 40)
	crashAfterRecovery(t, dir, spec, true)
	chains, _ := filepath.Glob(filepath.Join(dir, "j", "global", "chain-*.bin"))
	if len(chains) < 2 {
		t.Fatalf("chains %v", chains)
	}
	newest := chains[len(chains)-1]
	damageFile(t, newest, func(b []byte) []byte { b[20] ^= 0x40; return b })
	damaged, _ := os.ReadFile(newest)
	e2 := ftEngine(t, dir)
	defer e2.Close(context.Background())
	j2 := mustPut(t, e2, spec)
	rep := j2.Recovery()
	if rep == nil || !strings.Contains(strings.Join(rep.Skipped, ";"), filepath.Base(newest)) {
		t.Fatalf("recovery %+v", rep)
	}
	rel, _ := filepath.Rel(dir, newest)
	assertQuarantinedCopy(t, rep, dir, filepath.ToSlash(rel), damaged)
}

// The earlier version's metadata files, without checksums, are read once:
// an 8-byte sequence mark, an empty clean marker, a plain JSON history.
func TestMetadataOfTheEarlierVersionIsRead(t *testing.T) {
	dir := t.TempDir()
	spec := ftJobSpec(ft.ModeApprox, 40)
	crashAfterRecovery(t, dir, spec, true)
	hist, _, err := ft.ReadJobFile(dir, "j", ft.RecoveryHistory)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"j/0/seq":                 {30, 0, 0, 0, 0, 0, 0, 0},
		"j/" + ft.CleanMarker:     nil,
		"j/" + ft.RecoveryHistory: hist,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e2 := ftEngine(t, dir)
	defer e2.Close(context.Background())
	j2 := mustPut(t, e2, spec)
	rep := j2.Recovery()
	if rep == nil || !rep.Clean || rep.Lost != 0 || rep.Failures != 1 || len(rep.Skipped) != 0 {
		t.Fatalf("recovery %+v", rep)
	}
	if h := j2.Status(false).FT.Recoveries; len(h) != 2 {
		t.Fatalf("history of %d recoveries, want 2", len(h))
	}
}

// partsOf counts the events of events(n, 0) per partition of j.
func partsOf(j *Job, n int) []int {
	out := make([]int, len(j.parts))
	for i := range n {
		out[j.partitionFor(fmt.Sprintf("k%d", i))]++
	}
	return out
}

// Mode exact, a request over two partitions, and a crash between its two
// parts: the first part is durable in its item log, the second never got
// there, and the request got no 202. Recovery replays none of it (counted
// as unacknowledged, not lost), and replays a whole request before it.
func TestExactRequestCutBetweenPartsIsNotReplayed(t *testing.T) {
	dir, spec, e, j := twoPartitionJob(t, ft.ModeExact, 1000)
	j.Pause() // nothing reaches the state: the logs are all there is
	whole := events(20, 0)
	if counts := partsOf(j, len(whole)); counts[0] == 0 || counts[1] == 0 {
		t.Fatalf("the test needs both partitions: %v", counts)
	}
	if _, err := ingest(e, "s", whole...); err != nil {
		t.Fatal(err)
	}
	// The "crash": partition 1's part is never appended. Partition 0's is,
	// and is made durable, as another request's group commit would.
	crash := errors.New("injected crash")
	itemLog(j.ft.parts[1]).SetAppendHook(func(uint64, uint64) error { return crash })
	cut := events(20, 0)
	if _, err := ingest(e, "s", cut...); !errors.Is(err, ErrDurability) {
		t.Fatalf("the cut request: %v", err)
	}
	if err := j.ft.parts[0].log.Commit(); err != nil {
		t.Fatal(err)
	}
	p0 := int64(partsOf(j, len(cut))[0])

	e2 := ftEngine(t, dir)
	defer e2.Close(context.Background())
	j2 := mustPut(t, e2, spec)
	rep := j2.Recovery()
	if rep == nil || rep.Lost != 0 || rep.Replayed != 20 || rep.Unacknowledged != p0 {
		t.Fatalf("recovery %+v, want 20 replayed, %d unacknowledged", rep, p0)
	}
	waitCount(t, j2, 20)
	// Sequence numbers go on after the dropped part, and new requests are
	// taken and survive the next crash whole.
	if _, err := ingest(e2, "s", events(20, 0)...); err != nil {
		t.Fatal(err)
	}
	waitCount(t, j2, 40)
	waitFullBackup(t, j2)
	j2.Pause()
	e3 := ftEngine(t, dir)
	defer e3.Close(context.Background())
	j3 := mustPut(t, e3, spec)
	if rep := j3.Recovery(); rep == nil || rep.Lost != 0 || rep.Unacknowledged != 0 {
		t.Fatalf("second recovery %+v", rep)
	}
	waitCount(t, j3, 40)
}

// Truncation after a backup never drops a part of a request while another
// part of it is not yet in a backup: recovery tells a cut request from a
// truncated one by that.
func TestTruncationHoldsBackForOpenRequests(t *testing.T) {
	rs := &requests{durable: make([]uint64, 2)}
	r := &ftRequest{reqs: rs, parts: []int{0, 1}, first: make([]uint64, 2), last: make([]uint64, 2)}
	rs.open = []*ftRequest{r}
	r.logged(0, 5, 7)
	// Partition 1's part is not logged yet: partition 0 keeps 5..7.
	if got := rs.backedUp([]int{0}, []uint64{10}); got[0] != 4 {
		t.Fatalf("truncate partition 0 to %d, want 4", got[0])
	}
	r.logged(1, 3, 4)
	if got := rs.backedUp([]int{0}, []uint64{10}); got[0] != 4 {
		t.Fatalf("partition 1's part not in a backup: truncate to %d, want 4", got[0])
	}
	if got := rs.backedUp([]int{1}, []uint64{4}); got[0] != 4 || len(rs.open) != 0 {
		t.Fatalf("both parts backed up: truncate to %d, open %d", got[0], len(rs.open))
	}
	if got := rs.backedUp([]int{0}, []uint64{12}); got[0] != 12 {
		t.Fatalf("after the request: truncate to %d", got[0])
	}
	// An abandoned request holds nothing back.
	r2 := &ftRequest{reqs: rs, parts: []int{0, 1}, first: make([]uint64, 2), last: make([]uint64, 2)}
	rs.open = []*ftRequest{r2}
	r2.logged(0, 13, 14)
	r2.abandon()
	if got := rs.backedUp([]int{0}, []uint64{20}); got[0] != 20 {
		t.Fatalf("abandoned request: truncate to %d", got[0])
	}
}

// Mode exact with a flipped byte in the item log: the events of the
// damaged frame were acknowledged and are gone, so they count as lost
// (and as lost to damage), not as unacknowledged, and replay goes on with
// the next frame (today it stopped at the damage); a torn tail (what
// kill -9 leaves: a frame whose commit never returned) counts as
// unacknowledged.
func TestExactDamagedItemLogCountsAsLost(t *testing.T) {
	for _, c := range []struct {
		name                  string
		damage                func(b []byte) []byte
		lost, unacked, replay int64
	}{
		{"flipped", func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b }, 10, 0, 20},
		{"torn tail", func(b []byte) []byte { return b[:len(b)-5] }, 0, 10, 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			spec := ftJobSpec(ft.ModeExact, 1000)
			e := ftEngine(t, dir)
			j := mustPut(t, e, spec)
			waitFullBackup(t, j)
			j.Pause()
			committed := filepath.Join(dir, "j", "0", "committed")
			var before []byte
			for r := range 3 {
				if r == 2 {
					before, _ = os.ReadFile(committed)
				}
				if _, err := ingest(e, "s", events(10, 10*r)...); err != nil {
					t.Fatal(err)
				}
			}
			segs, _ := filepath.Glob(filepath.Join(dir, "j", "0", "items-*.log"))
			if len(segs) != 1 {
				t.Fatalf("segments %v", segs)
			}
			damageFile(t, segs[0], c.damage)
			if c.name == "torn tail" {
				// The crash tore the last request's frame before its commit
				// returned: the commit mark is where the request before left it.
				if err := os.WriteFile(committed, before, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			e2 := ftEngine(t, dir)
			defer e2.Close(context.Background())
			j2 := mustPut(t, e2, spec)
			rep := j2.Recovery()
			if rep == nil || rep.Lost != c.lost || rep.LostToDamage != c.lost || rep.Unacknowledged != c.unacked || int64(rep.Replayed) != c.replay {
				t.Fatalf("recovery %+v", rep)
			}
			// Exact mode's figures: its promise is that nothing is lost.
			if rep.Mode != ft.ModeExact || rep.Bound != (ft.Bound{}) || rep.Within != (c.lost == 0) {
				t.Fatalf("exact recovery judged as %s: bound %+v, within %v", rep.Mode, rep.Bound, rep.Within)
			}
			waitCount(t, j2, c.replay)
		})
	}
}

// Mode exact, requests over two partitions, and one partition's item log
// damaged: a flipped byte costs the one frame it hits, counted as lost
// and acknowledged, and nothing of the other partition; a log cut to
// half costs what was cut, counted the same way, never as
// unacknowledged (today: the replay tail of both partitions was thrown
// away, and half or all of it called unacknowledged).
func TestExactItemLogDamageIsContained(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(b []byte) []byte
	}{
		{"flipped", func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b }},
		{"cut to half", func(b []byte) []byte { return b[:len(b)/2+3] }},
		// Every frame has the same size here: half is a frame's end.
		{"cut at a frame's end", func(b []byte) []byte { return b[:len(b)/2] }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, spec, e, j := twoPartitionJob(t, ft.ModeExact, 100000)
			j.Pause() // nothing reaches the state: the logs are all there is
			const requests, size = 20, 20
			for range requests {
				if _, err := ingest(e, "s", events(size, 0)...); err != nil {
					t.Fatal(err)
				}
			}
			p0 := int64(partsOf(j, size)[0])
			segs, _ := filepath.Glob(filepath.Join(dir, "j", "0", "items-*.log"))
			if len(segs) != 1 || p0 == 0 || p0 == size {
				t.Fatalf("segments %v, %d of %d events in partition 0", segs, p0, size)
			}
			damageFile(t, segs[0], c.damage)
			e2 := ftEngine(t, dir)
			defer e2.Close(context.Background())
			j2 := mustPut(t, e2, spec)
			rep := j2.Recovery()
			if rep == nil || rep.Lost == 0 || rep.Lost != rep.LostToDamage || rep.Unacknowledged != 0 ||
				int64(rep.Replayed)+rep.Lost != requests*size || rep.Lost%p0 != 0 || len(rep.LostRanges[1]) != 0 {
				t.Fatalf("recovery %+v (partition 0 has %d events of each request)", rep, p0)
			}
			if c.name == "flipped" && rep.Lost != p0 {
				t.Fatalf("a flipped byte lost %d events, want the %d of one frame", rep.Lost, p0)
			}
			// The damaged file is copied to the quarantine; a file cut at a
			// frame's end is not damaged in form, only short, which the
			// report says.
			if frameEnd := c.name == "cut at a frame's end"; len(rep.Quarantined) != 1 && !frameEnd ||
				frameEnd && !strings.Contains(strings.Join(rep.Skipped, ";"), "commits reached") {
				t.Fatalf("quarantined %q, skipped %q", rep.Quarantined, rep.Skipped)
			}
			waitCount(t, j2, int64(rep.Replayed))
		})
	}
}
