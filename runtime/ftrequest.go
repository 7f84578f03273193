package runtime

import (
	"encoding/binary"
	"errors"
	"slices"
	"sync"

	"github.com/mlstream/mlstream/ft"
)

// Requests in mode exact: a request is made durable whole or not at all.
//
// Each partition's part of a request is one item-log frame (ft.Frame), so
// a crash keeps all of a part or none of it. A request that spans several
// partitions has several frames, in several logs, written one after the
// other: a crash between them leaves some parts durable and others not.
// Such a request never got its 202 (that comes after every part's fsync),
// and recovery must not replay half of it. So each part's frame carries a
// tag: the request's id and the partitions it spans; recovery replays a
// tagged part only if every part the tag names is in its log, and drops
// the others whole (counted as unacknowledged, not as lost).
//
// That rule is only sound if a part missing from its log means a part
// never written, not one already folded into a backup and truncated from
// the log. The truncation after a backup therefore holds back at the
// first frame of any request whose parts are not yet all in written
// backups (requests.backedUp): a part leaves its log only once every part
// of its request is in the state that recovery restores. Requests within
// one partition need none of this: their one frame is whole or absent.
//
// Why this holds, for a request r spanning partitions P:
//   - r acknowledged: every part was fsynced before the 202. A part that
//     still needs replay after a crash is above its partition's restored
//     state; had another part of r been truncated, r would have been
//     wholly in backups, this one included. So every part is in its log,
//     and all that need it are replayed.
//   - r not acknowledged: its parts are replayed only if all are in their
//     logs (then r is whole, though never acknowledged: the client got no
//     answer and may send it again, as after any lost reply), else none.
//
// A request's batches are processed only once every part is durable
// (commitGate, durability.go), and dropped if one part could not be: no
// backup holds part of a request that a crash then cuts short.

// ftRequest is a request's share of one job in mode exact when it spans
// several partitions; nil otherwise (its methods accept a nil receiver).
type ftRequest struct {
	reqs  *requests
	id    uint64
	tag   []byte
	parts []int    // the partitions, increasing
	first []uint64 // per part: its first seq once logged, else 0; guarded by reqs.mu
	last  []uint64
}

// requests tracks a job's multi-partition requests until all their parts
// are in written backups.
type requests struct {
	mu      sync.Mutex
	nextID  uint64
	open    []*ftRequest
	durable []uint64 // per partition: the last seq in a written backup
}

// ftRequest starts the share of a request of the job (parts: its records
// per partition): non-nil in mode exact when it spans several partitions.
func (j *Job) ftRequest(parts [][]Record) *ftRequest {
	if j.ft == nil || j.ft.spec.Mode != ft.ModeExact {
		return nil
	}
	var ps []int
	for i, recs := range parts {
		if len(recs) > 0 {
			ps = append(ps, i)
		}
	}
	if len(ps) < 2 {
		return nil
	}
	rs := &j.ft.reqs
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := &ftRequest{reqs: rs, id: rs.nextID, parts: ps, first: make([]uint64, len(ps)), last: make([]uint64, len(ps))}
	rs.nextID++
	r.tag = encodeTag(r.id, ps)
	rs.open = append(rs.open, r)
	return r
}

func (r *ftRequest) tagFor() []byte {
	if r == nil {
		return nil
	}
	return r.tag
}

// logged records that the part in partition p has seqs first to last in
// its item log.
func (r *ftRequest) logged(p int, first, last uint64) {
	if r == nil {
		return
	}
	k, _ := slices.BinarySearch(r.parts, p)
	r.reqs.mu.Lock()
	r.first[k], r.last[k] = first, last
	r.reqs.mu.Unlock()
}

// abandon forgets a request that failed before its reply: it was not
// acknowledged, and a part that never gets logged must not hold the
// truncation of the others back for ever.
func (r *ftRequest) abandon() {
	if r == nil {
		return
	}
	rs := r.reqs
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if i := slices.Index(rs.open, r); i >= 0 {
		rs.open = slices.Delete(rs.open, i, i+1)
	}
}

// covered says whether every part of r is logged and in a written backup.
// Called with reqs.mu held.
func (r *ftRequest) covered(durable []uint64) bool {
	for k, p := range r.parts {
		if r.first[k] == 0 || r.last[k] > durable[p] {
			return false
		}
	}
	return true
}

// backedUp records a written backup of the partitions parts, holding the
// events up to seqs, and returns how far each partition's item log may be
// truncated: to seqs, but never past the first frame of a request that is
// not yet wholly in written backups.
func (rs *requests) backedUp(parts []int, seqs []uint64) []uint64 {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for i, p := range parts {
		rs.durable[p] = max(rs.durable[p], seqs[i])
	}
	open := rs.open[:0]
	for _, r := range rs.open {
		if !r.covered(rs.durable) {
			open = append(open, r)
		}
	}
	clear(rs.open[len(open):])
	rs.open = open
	upTo := slices.Clone(seqs)
	for _, r := range rs.open {
		for i, p := range parts {
			if k, ok := slices.BinarySearch(r.parts, p); ok && r.first[k] != 0 && r.first[k] <= upTo[i] {
				upTo[i] = r.first[k] - 1
			}
		}
	}
	return upTo
}

// encodeTag is a part's tag: the request id and its partitions, uvarints.
func encodeTag(id uint64, parts []int) []byte {
	b := binary.AppendUvarint(nil, id)
	b = binary.AppendUvarint(b, uint64(len(parts)))
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(p))
	}
	return b
}

var errBadTag = errors.New("runtime: unreadable request tag")

// decodeTag is the inverse of encodeTag; partitions must be below n.
func decodeTag(b []byte, n int) (id uint64, parts []int, err error) {
	id, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, nil, errBadTag
	}
	b = b[k:]
	c, k := binary.Uvarint(b)
	if k <= 0 || c > uint64(n) {
		return 0, nil, errBadTag
	}
	b = b[k:]
	for range c {
		p, k := binary.Uvarint(b)
		if k <= 0 || p >= uint64(n) {
			return 0, nil, errBadTag
		}
		parts = append(parts, int(p))
		b = b[k:]
	}
	if len(b) != 0 {
		return 0, nil, errBadTag
	}
	return id, parts, nil
}

// recovered resets the tracking after a recovery: the restored state
// (base) is what written backups hold, and the whole requests found in
// the logs are tracked again, so that truncation keeps their parts until
// the state holds all of them. New ids go on above the ones found.
func (rs *requests) recovered(base []uint64, found foundRequests) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	copy(rs.durable, base)
	rs.open = nil
	for id, fr := range found {
		rs.nextID = max(rs.nextID, id+1)
		if !found.wholeID(id) {
			continue
		}
		r := &ftRequest{reqs: rs, id: id, parts: fr.parts, first: make([]uint64, len(fr.parts)), last: make([]uint64, len(fr.parts))}
		for k, p := range fr.parts {
			r.first[k], r.last[k] = fr.found[p][0], fr.found[p][1]
		}
		if !r.covered(rs.durable) {
			rs.open = append(rs.open, r)
		}
	}
}
