package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// The JetStream names of the cluster. A job's streams and state keys are
// named by its id, its name made safe for subjects and stream names
// (dots are token separators there) plus its incarnation, so that a job
// deleted and created again under the same name never reads the old
// one's events or state.
const (
	bucketJobs  = "mls_jobs"  // job name → jobRecord
	bucketState = "mls_state" // <id>.p<N> or <id>.global → backup (state.go)
	lagSubject  = "mls.lag"   // owners' lag reports (core NATS)
	outSubject  = "mls.out"   // outputs: mls.out.<id> (core NATS)
)

// globalKey is the lease and state key suffix of a job's global unit.
const globalKey = "global"

func newIncarnation() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// jobID is the subject- and stream-safe name of one incarnation of a job.
func jobID(name, incarnation string) string {
	var b strings.Builder
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			b.WriteRune(c)
		default:
			b.WriteByte('_')
		}
	}
	return b.String() + "_" + incarnation
}

func inputSubject(id string, p int) string { return "mls.in." + id + "." + strconv.Itoa(p) }
func inputStream(id string, g int) string  { return "MLS_IN_" + id + "_" + strconv.Itoa(g) }
func deltaStream(id string) string         { return "MLS_DELTA_" + id }
func deltaSubject(id string, p int) string { return "mls.delta." + id + "." + strconv.Itoa(p) }
func stateKey(id string, p int) string {
	if p < 0 {
		return id + "." + globalKey
	}
	return id + ".p" + strconv.Itoa(p)
}

// leaseKey names the lease of partition p of a job (p < 0: its global
// unit). Job names may hold dots; the suffix never does.
func leaseKey(job string, p int) string {
	if p < 0 {
		return job + "." + globalKey
	}
	return job + ".p" + strconv.Itoa(p)
}

// parseLeaseKey is the inverse of leaseKey.
func parseLeaseKey(key string) (job string, p int, err error) {
	i := strings.LastIndexByte(key, '.')
	if i <= 0 {
		return "", 0, fmt.Errorf("cluster: bad lease key %q", key)
	}
	job, suffix := key[:i], key[i+1:]
	if suffix == globalKey {
		return job, -1, nil
	}
	if !strings.HasPrefix(suffix, "p") {
		return "", 0, fmt.Errorf("cluster: bad lease key %q", key)
	}
	p, err = strconv.Atoi(suffix[1:])
	if err != nil || p < 0 {
		return "", 0, fmt.Errorf("cluster: bad lease key %q", key)
	}
	return job, p, nil
}
