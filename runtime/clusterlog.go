package runtime

import (
	"encoding/binary"
	"math"

	"github.com/mlstream/mlstream/learners"
)

// A cluster log message holds one partition's records of one request. Its
// cost in JetStream (stored, sent to the owner, decoded) grows with its
// bytes, so it is more compact than the item log's record format: event
// times as differences from the message's first, no per-record length,
// flags in one byte, a key equal to the first value stored once, feature
// values of 1 not stored, a zero Value not stored.
//
//	0x00 logVersion uvarint(count) varint(baseTS) record...
//	record: flags varint(TS-baseTS) [uvarint(len) key] uvarint(nf)
//	        nf × (hash [value]) uvarint(nv) nv × (uvarint(len) bytes) [value]
//
// Messages of the older format (a count first, never 0, then
// length-prefixed item-log records) are still read, so that a node reads
// what an older node wrote during a rolling upgrade.
const (
	logMarker  = 0x00
	logVersion = 1
)

// minLogRecord is the fewest bytes a record takes (flags, time, key or
// key flag, feature count, value count), which bounds the records a
// message of some size may announce.
const minLogRecord = 4

const (
	flagLabel    = 0b11 // Label+1
	flagSide     = 1 << 2
	flagValue    = 1 << 3 // Value follows the values
	flagKeyValue = 1 << 4 // Key is Values[0]
	flagOnes     = 1 << 5 // every feature's value is 1: not stored
	flagKnown    = flagLabel | flagSide | flagValue | flagKeyValue | flagOnes
)

// AppendRecords encodes recs as a cluster log message.
func AppendRecords(b []byte, recs []Record) []byte {
	b = append(b, logMarker, logVersion)
	b = binary.AppendUvarint(b, uint64(len(recs)))
	var base int64
	if len(recs) > 0 {
		base = recs[0].TS
	}
	b = binary.AppendVarint(b, base)
	for i := range recs {
		b = appendLogRecord(b, &recs[i], base)
	}
	return b
}

func appendLogRecord(b []byte, r *Record, base int64) []byte {
	flags := recordFlags(r)
	b = append(b, flags)
	b = binary.AppendVarint(b, r.TS-base)
	if flags&flagKeyValue == 0 {
		b = binary.AppendUvarint(b, uint64(len(r.Key)))
		b = append(b, r.Key...)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Features)))
	for _, f := range r.Features {
		b = binary.LittleEndian.AppendUint64(b, f.Hash)
		if flags&flagOnes == 0 {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f.Value))
		}
	}
	b = binary.AppendUvarint(b, uint64(len(r.Values)))
	for _, v := range r.Values {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	if flags&flagValue != 0 {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(r.Value))
	}
	return b
}

func recordFlags(r *Record) byte {
	flags := byte(r.Label+1) & flagLabel
	if r.Side != 0 {
		flags |= flagSide
	}
	if r.Value != 0 {
		flags |= flagValue
	}
	if len(r.Values) > 0 && r.Key != "" && r.Key == r.Values[0] {
		flags |= flagKeyValue
	}
	if len(r.Features) > 0 && allOnes(r.Features) {
		flags |= flagOnes
	}
	return flags
}

func allOnes(fs []learners.Feature) bool {
	for _, f := range fs {
		if f.Value != 1 {
			return false
		}
	}
	return true
}

// Logged is the records of one cluster log message, decoded onto pooled
// arrays: Job.Deliver returns them once the partition has processed the
// records; Release does for records not delivered.
type Logged struct {
	Recs []Record
	bufs *buffers
}

// Release returns the arrays of records that were not delivered.
func (l Logged) Release() {
	if l.bufs != nil {
		l.bufs.holders.Store(1)
		l.bufs.release()
	}
}

// DecodeLogged decodes a cluster log message, the inverse of
// AppendRecords. The records' strings are their own (copied from data,
// which may be reused); the arrays of records, features and values are
// pooled (see Logged). A count or length larger than the data holds is
// refused before anything is allocated for it.
func DecodeLogged(data []byte) (Logged, error) {
	if len(data) > 0 && data[0] != logMarker {
		recs, err := decodeItemRecords(data)
		return Logged{Recs: recs}, err
	}
	bufs := getBuffers(1)
	a := arena{feats: bufs.feats, vals: bufs.vals}
	recs, err := decodeLog(data, bufs.parts[0], &a)
	bufs.parts[0], bufs.feats, bufs.vals = recs, a.feats, a.vals
	l := Logged{Recs: recs, bufs: bufs}
	if err != nil {
		l.Release()
		return Logged{}, err
	}
	return l, nil
}

// decodeLog decodes the current format into recs (emptied) and a.
func decodeLog(data []byte, recs []Record, a *arena) ([]Record, error) {
	if len(data) < 2 || data[0] != logMarker || data[1] != logVersion {
		return recs, errBadRecord
	}
	p := data[2:]
	n, k := binary.Uvarint(p)
	if k <= 0 || n > uint64(len(p)) {
		return recs, errBadRecord
	}
	p = p[k:]
	base, k := binary.Varint(p)
	if k <= 0 {
		return recs, errBadRecord
	}
	p = p[k:]
	if n > uint64(len(p)/minLogRecord) {
		return recs, errBadRecord
	}
	// Strings go to blocks that grow from what a small message needs.
	a.bytes = make([]byte, 0, min(len(p), 4<<10))
	recs = reserve(recs, int(n))[:n]
	var err error
	for i := range recs {
		if p, err = decodeLogRecord(p, base, &recs[i], a); err != nil {
			return recs, err
		}
	}
	if len(p) != 0 {
		return recs, errBadRecord
	}
	return recs, nil
}

func decodeLogRecord(p []byte, base int64, r *Record, a *arena) ([]byte, error) {
	if len(p) < 1 || p[0]&^flagKnown != 0 || p[0]&flagLabel > 2 {
		return p, errBadRecord
	}
	flags := p[0]
	*r = Record{Label: int8(flags&flagLabel) - 1}
	if flags&flagSide != 0 {
		r.Side = 1
	}
	d, k := binary.Varint(p[1:])
	if k <= 0 {
		return p, errBadRecord
	}
	r.TS = base + d
	p = p[1+k:]
	var err error
	if flags&flagKeyValue == 0 {
		var key []byte
		if key, p, err = lengthPrefixed(p); err != nil {
			return p, err
		}
		r.Key = a.str(key)
	}
	if p, err = decodeLogFeatures(p, flags&flagOnes != 0, r, a); err != nil {
		return p, err
	}
	if p, err = decodeLogValues(p, r, a); err != nil {
		return p, err
	}
	if flags&flagKeyValue != 0 {
		if len(r.Values) == 0 {
			return p, errBadRecord
		}
		r.Key = r.Values[0]
	}
	if flags&flagValue != 0 {
		if len(p) < 8 {
			return p, errBadRecord
		}
		r.Value = math.Float64frombits(binary.LittleEndian.Uint64(p))
		p = p[8:]
	}
	return p, nil
}

func decodeLogFeatures(p []byte, ones bool, r *Record, a *arena) ([]byte, error) {
	nf, k := binary.Uvarint(p)
	size := uint64(16)
	if ones {
		size = 8
	}
	if k <= 0 || nf > uint64(len(p)) || uint64(len(p)-k) < nf*size {
		return p, errBadRecord
	}
	p = p[k:]
	start := len(a.feats)
	for i := range nf {
		f := learners.Feature{Hash: binary.LittleEndian.Uint64(p[size*i:]), Value: 1}
		if !ones {
			f.Value = math.Float64frombits(binary.LittleEndian.Uint64(p[size*i+8:]))
		}
		a.feats = append(a.feats, f)
	}
	if nf > 0 {
		r.Features = a.feats[start:len(a.feats):len(a.feats)]
	}
	return p[size*nf:], nil
}

func decodeLogValues(p []byte, r *Record, a *arena) ([]byte, error) {
	nv, k := binary.Uvarint(p)
	if k <= 0 || nv > uint64(len(p)) {
		return p, errBadRecord
	}
	p = p[k:]
	start := len(a.vals)
	for range nv {
		var v []byte
		var err error
		if v, p, err = lengthPrefixed(p); err != nil {
			return p, err
		}
		a.vals = append(a.vals, a.str(v))
	}
	if nv > 0 {
		r.Values = a.vals[start:len(a.vals):len(a.vals)]
	}
	return p, nil
}

// lengthPrefixed splits a uvarint length and that many bytes off p.
func lengthPrefixed(p []byte) (b, rest []byte, err error) {
	l, k := binary.Uvarint(p)
	if k <= 0 || l > uint64(len(p)-k) {
		return nil, p, errBadRecord
	}
	return p[k : k+int(l)], p[k+int(l):], nil
}

// decodeItemRecords reads the older format: a count, then item-log
// records, each length-prefixed.
func decodeItemRecords(data []byte) ([]Record, error) {
	n, k := binary.Uvarint(data)
	if k <= 0 || n > uint64(len(data)) {
		return nil, errBadRecord
	}
	data = data[k:]
	recs := make([]Record, n)
	// One block each for the strings, the values and the features (made
	// at the first): they fit in what data holds (a feature takes 16
	// bytes of it), so nothing grows and copies.
	a := arena{bytes: make([]byte, 0, len(data)), vals: make([]string, 0, n), featHint: len(data) / 16}
	for i := range recs {
		rec, rest, err := lengthPrefixed(data)
		if err != nil {
			return nil, err
		}
		if err := decodeRecord(rec, &recs[i], &a); err != nil {
			return nil, err
		}
		data = rest
	}
	if len(data) != 0 {
		return nil, errBadRecord
	}
	return recs, nil
}
