package ft

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestJobDirRoundTrip(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenJobDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []JobRecord{
		{Name: "b", Incarnation: "1", Spec: []byte(`{"name":"b","kind":"distinct"}`)},
		{Name: "a", Incarnation: "2", Spec: []byte(`{"name":"a"}`)},
		{Name: "b", Incarnation: "3", Spec: []byte(`{"name":"b","kind":"logreg"}`)}, // replaces the first
	} {
		if err := d.Save(r); err != nil {
			t.Fatal(err)
		}
	}
	recs, damaged, err := d.Load()
	if err != nil || len(damaged) != 0 {
		t.Fatal(err, damaged)
	}
	if len(recs) != 2 || recs[0].Name != "a" || recs[1].Incarnation != "3" || string(recs[1].Spec) != `{"name":"b","kind":"logreg"}` {
		t.Fatalf("%+v", recs)
	}
	if err := d.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete("a"); err != nil {
		t.Fatalf("deleting again: %v", err)
	}
	if recs, _, _ := d.Load(); len(recs) != 1 || recs[0].Name != "b" {
		t.Fatalf("%+v", recs)
	}
	if err := d.Save(JobRecord{Name: "../x"}); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("save of a bad name: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("files left: %v", entries)
	}
}

// A damaged record is reported, named, and skipped; the others load.
func TestJobDirReportsDamagedRecords(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenJobDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"good", "flipped", "torn", "moved"} {
		if err := d.Save(JobRecord{Name: n, Incarnation: "1", Spec: []byte(`{"name":"` + n + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	path := func(n string) string { return filepath.Join(dir, n+".job") }
	data, _ := os.ReadFile(path("flipped"))
	data[len(data)-3] ^= 0x20
	must(t, os.WriteFile(path("flipped"), data, 0o644))
	data, _ = os.ReadFile(path("torn"))
	must(t, os.WriteFile(path("torn"), data[:len(data)-5], 0o644))
	must(t, os.Rename(path("moved"), path("other")))
	must(t, os.WriteFile(path("garbage"), []byte("\x00\x01 not a record"), 0o644))
	must(t, os.WriteFile(path("huge"), make([]byte, maxJobRecord+10), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, ".tmp-123"), []byte("half"), 0o644))

	recs, damaged, err := d.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Name != "good" {
		t.Fatalf("%+v", recs)
	}
	var msgs []string
	for _, e := range damaged {
		if !errors.Is(e, ErrBadJobRecord) {
			t.Errorf("%v does not wrap ErrBadJobRecord", e)
		}
		msgs = append(msgs, e.Error())
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"flipped.job: checksum mismatch", "torn.job: body is", "other.job: holds job \"moved\"", "garbage.job: no header line", "huge.job: larger than"} {
		if !strings.Contains(all, want) {
			t.Errorf("damage reports lack %q:\n%s", want, all)
		}
	}
	if len(damaged) != 5 {
		t.Errorf("%d damaged, want 5:\n%s", len(damaged), all)
	}
	// Reopening removes the temporary file of an interrupted Save.
	if _, err := OpenJobDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-123")); !os.IsNotExist(err) {
		t.Fatalf("temporary file left: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
