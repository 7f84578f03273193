package runtime

import (
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/mlstream/mlstream/learners"
)

// appendItemRecords writes the older format (for tests of reading it).
func appendItemRecords(b []byte, recs []Record) []byte {
	b = binary.AppendUvarint(b, uint64(len(recs)))
	var rec []byte
	for i := range recs {
		rec = appendRecord(rec[:0], &recs[i])
		b = binary.AppendUvarint(b, uint64(len(rec)))
		b = append(b, rec...)
	}
	return b
}

func logTestRecords() []Record {
	return []Record{
		{TS: 1764500000000, Label: -1, Key: "", Values: []string{"it42"}},
		{TS: 1764500000000, Label: -1, Key: "it7", Values: []string{"it7"}},
		{TS: 1764499999000, Label: 1, Key: "u1", Features: []learners.Feature{{Hash: 1, Value: 1}, {Hash: 2<<60 + 5, Value: 1}}},
		{TS: 1764500003000, Label: 0, Key: "u2", Features: []learners.Feature{{Hash: 3, Value: 0.5}, {Hash: 4, Value: -2}}},
		{TS: 17, Label: -1, Key: "k", Values: []string{"a", "", "c"}, Side: 1, Value: 12.5},
		{TS: -5, Label: -1},
	}
}

func TestLogRecordsRoundTrip(t *testing.T) {
	want := logTestRecords()
	data := AppendRecords(nil, want)
	for name, decode := range map[string]func([]byte) ([]Record, error){
		"decodeRecords": decodeRecords,
		"DecodeLogged":  func(b []byte) ([]Record, error) { l, err := DecodeLogged(b); return l.Recs, err },
	} {
		got, err := decode(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
	}
	if old := appendItemRecords(nil, want); len(data) >= len(old) {
		t.Errorf("the log format takes %d bytes, the item-log format %d", len(data), len(old))
	}
}

// A message an older node wrote (item-log records) is still read.
func TestLogRecordsReadsTheOlderFormat(t *testing.T) {
	want := logTestRecords()
	for i := range want {
		// The item-log format keeps no difference between nil and empty.
		if want[i].Values == nil {
			want[i].Values = []string{}
		}
	}
	l, err := DecodeLogged(appendItemRecords(nil, want))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	for i := range want {
		if want[i].Key != l.Recs[i].Key || want[i].TS != l.Recs[i].TS || !reflect.DeepEqual(want[i].Values, l.Recs[i].Values) ||
			want[i].Value != l.Recs[i].Value || len(want[i].Features) != len(l.Recs[i].Features) {
			t.Errorf("record %d: got %+v, want %+v", i, l.Recs[i], want[i])
		}
	}
}

// Truncated or corrupt messages are refused, and a count larger than the
// message could hold allocates nothing for it.
func TestLogRecordsRefusesMalformed(t *testing.T) {
	data := AppendRecords(nil, logTestRecords())
	for n := range len(data) {
		if _, err := DecodeLogged(data[:n]); err == nil {
			t.Errorf("a message cut at %d of %d bytes was read", n, len(data))
		}
	}
	huge := binary.AppendUvarint([]byte{logMarker, logVersion}, 1<<40)
	huge = binary.AppendVarint(huge, 0)
	if _, err := DecodeLogged(append(huge, make([]byte, 64)...)); err == nil {
		t.Error("a count of 2^40 records in 64 bytes was read")
	}
	bad := AppendRecords(nil, []Record{{Label: -1}}) // marker, version, count 1, base time 0, the record's flags
	bad[4] |= 0xc0                                   // unknown bits
	if _, err := DecodeLogged(bad); err == nil {
		t.Error("unknown flags were read")
	}
}

func FuzzDecodeLogged(f *testing.F) {
	f.Add(AppendRecords(nil, logTestRecords()))
	f.Add(appendItemRecords(nil, logTestRecords()))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := DecodeLogged(data)
		if err != nil {
			return
		}
		defer l.Release()
		again, err := decodeRecords(AppendRecords(nil, l.Recs))
		if err != nil || len(again) != len(l.Recs) {
			t.Fatalf("re-encoding %d records: %d, %v", len(l.Recs), len(again), err)
		}
	})
}

// decodeRecords decodes a cluster log message onto arrays of its own, as
// a reference beside DecodeLogged's pooled ones.
func decodeRecords(data []byte) ([]Record, error) {
	if len(data) > 0 && data[0] != logMarker {
		return decodeItemRecords(data)
	}
	var a arena
	return decodeLog(data, nil, &a)
}
