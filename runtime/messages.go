package runtime

import (
	"encoding/json"
	"strconv"

	"github.com/mlstream/mlstream/ft"
)

// The messages of the WebSocket feed and the hub. Every message is one
// JSON object in the same envelope: {"type": t, "job": name, "ts": ms,
// ...}, ts being epoch milliseconds (of the event for per-event messages,
// of the moment of publishing for the others). The engine's own types are
// defined here; each kind defines its own in its package (Kind.Messages),
// with append encoders for the per-event ones.

// The engine's message types.
const (
	TypeStats    = "stats"    // a job's status, once a second
	TypeBackup   = "backup"   // a state backup was written
	TypeRecovery = "recovery" // a job restarted from its backups
	TypeFailover = "failover" // a partition changed owner (cluster mode)
	TypeRescale  = "rescale"  // a job's partition count changed (rescale.go)
)

// engineTypes are the message types of every job, whatever its kind.
var engineTypes = []string{TypeStats, TypeBackup, TypeRecovery, TypeFailover, TypeRescale}

// FailoverMessage says that a partition of a job (or its global unit)
// changed owner in a cluster (type failover); ts is when the new owner
// began serving it.
type FailoverMessage struct {
	Envelope
	Failover Failover `json:"failover"`
}

// Failover is one change of owner.
type Failover struct {
	Partition *int   `json:"partition,omitempty"` // absent for the global unit
	From      string `json:"from,omitempty"`      // the node that wrote the state last ("" when none had)
	To        string `json:"to"`
	Token     uint64 `json:"token"` // the new owner's fencing token
	// Graceful is true when the previous owner handed the partition over
	// (it left or the cluster rebalanced), false when it stopped
	// renewing its lease (crash, pause, cut off).
	Graceful bool `json:"graceful"`
	// SinceLastWriteMs is the time between the previous owner's last
	// backup (or delta) and this take-over: how stale the restored state
	// was before the replay.
	SinceLastWriteMs int64 `json:"since_last_write_ms"`
	TookMs           int64 `json:"took_ms"` // fence, restore and subscribe
	// ReplayFrom is the log position (stream sequence) the new owner
	// replays from: every accepted event from there on is processed
	// again, so nothing acknowledged is lost while the stream retains it.
	ReplayFrom uint64 `json:"replay_from"`
	// Lost counts the log messages that retention dropped before they
	// could be replayed (0 unless the outage outlasted the retention).
	Lost uint64 `json:"lost"`
	// Damaged says that the partition's latest backup did not decode, and
	// what the take-over restored instead (an older backup, or nothing:
	// the retained stream is replayed).
	Damaged string `json:"damaged,omitempty"`
}

// EncodeFailover encodes a failover message.
func EncodeFailover(job string, at int64, f Failover) ([]byte, error) {
	return json.Marshal(FailoverMessage{Envelope{TypeFailover, job, at}, f})
}

// Envelope is what every message carries. A message type embeds it, and
// the message's own fields follow; for a message about one thing the
// field is named after the type ({"type": "topk", ..., "topk": {...}}).
type Envelope struct {
	Type string `json:"type"`
	Job  string `json:"job"`
	TS   int64  `json:"ts"`
}

func (e Envelope) envelope() Envelope { return e }

// StatsMessage is a job's status (type stats), once a second to each
// subscriber; Dropped counts the messages this subscriber missed.
type StatsMessage struct {
	Envelope
	Dropped uint64    `json:"dropped"`
	Stats   JobStatus `json:"stats"`
}

// RecoveryMessage is a job's recovery report (type recovery); ts is when
// the recovery ended. Sent when it happens and, to a new subscriber, for
// the last one.
type RecoveryMessage struct {
	Envelope
	Recovery *RecoveryReport `json:"recovery"`
}

// EncodeRecovery encodes the recovery message of rep.
func EncodeRecovery(job string, rep *RecoveryReport) ([]byte, error) {
	return json.Marshal(RecoveryMessage{Envelope{TypeRecovery, job, rep.At.UnixMilli()}, rep})
}

// BackupMessage is a unit of state backed up (type backup); ts is the
// backup's creation time. Partition is the unit's one partition, absent
// for a unit of the whole job.
type BackupMessage struct {
	Envelope
	Index      uint64   `json:"index"`
	Full       bool     `json:"full"`
	Bytes      int      `json:"bytes"`
	Divergence float64  `json:"divergence"`
	LastSeqs   []uint64 `json:"last_seqs"`
	Partitions []int    `json:"partitions"`
	Partition  *int     `json:"partition,omitempty"`
}

// encodeBackup encodes the backup message of unit u's backup meta of n
// bytes.
func encodeBackup(job string, u *stateUnit, meta ft.BackupMeta, n int) ([]byte, error) {
	m := BackupMessage{Envelope: Envelope{TypeBackup, job, meta.Created.UnixMilli()}, Index: meta.Index, Full: meta.Full,
		Bytes: n, Divergence: meta.Divergence, LastSeqs: meta.LastSeqs, Partitions: u.parts}
	if p := u.partition(); p >= 0 {
		m.Partition = &p
	}
	return json.Marshal(m)
}

// AppendEnvelope starts a message built by hand (the per-event ones, too
// frequent for encoding/json): {"type":typ,"job":job,"ts":ts and the
// caller appends its fields, each with a leading comma, and the closing
// brace.
func AppendEnvelope(b []byte, typ, job string, ts int64) []byte {
	b = append(b, `{"type":`...)
	b = AppendJSONString(b, typ)
	b = append(b, `,"job":`...)
	b = AppendJSONString(b, job)
	b = append(b, `,"ts":`...)
	return strconv.AppendInt(b, ts, 10)
}
