package runtime

import (
	"fmt"
	"testing"

	"github.com/mlstream/mlstream/learners"
)

// benchRecords are n records as a heavy-hitters job (one value) or a
// logreg job (features) extracts them.
func benchRecords(n int, features bool) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{TS: 1764500000000 + int64(i), Label: -1, Key: fmt.Sprintf("user-%d", i%1013)}
		if features {
			for k := range 20 {
				recs[i].Features = append(recs[i].Features, learners.Feature{Hash: uint64(i*31 + k), Value: 1})
			}
		} else {
			recs[i].Values = []string{fmt.Sprintf("item-%d", i%997)}
		}
	}
	return recs
}

// A log message of 167 events (a 1,000-event request over 6 partitions)
// decoded by its partition's owner.
func BenchmarkDecodeRecords(b *testing.B) {
	for _, tc := range []struct {
		name     string
		features bool
	}{{"values", false}, {"features", true}} {
		b.Run(tc.name, func(b *testing.B) {
			data := AppendRecords(nil, benchRecords(167, tc.features))
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				l, err := DecodeLogged(data)
				if err != nil {
					b.Fatal(err)
				}
				l.Release()
			}
		})
	}
}

func BenchmarkAppendRecords(b *testing.B) {
	recs := benchRecords(167, false)
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendRecords(buf[:0], recs)
	}
}
