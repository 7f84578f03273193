package lease

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"
)

// Membership is checked against the lease bucket: a node counts for the
// assignment only while it holds its membership lease (memberKey, taken
// and renewed as any other), besides a heartbeat that decodes, names its
// own key and says a plausible number of cores. A heartbeat alone (a
// record written by anyone who reaches the bucket, or a damaged one) takes
// no key: a forged node would otherwise be given keys that nobody then
// holds. Nodes of older versions hold no membership lease: a cluster is
// upgraded as a whole.

// memberPrefix starts the lease key of a node's membership: "=node.<name>"
// (no job name starts with "=").
const memberPrefix = "=node."

// maxCores bounds the cores a heartbeat may claim: more is a bad record.
const maxCores = 4096

func memberKey(node string) string { return memberPrefix + node }

// IsMemberKey tells whether key is a node's membership lease rather than a
// unit of work.
func IsMemberKey(key string) bool { return strings.HasPrefix(key, memberPrefix) }

// workKeys is keys without membership leases.
func workKeys(keys []string) []string {
	return slices.DeleteFunc(slices.Clone(keys), IsMemberKey)
}

// membersLocked is the live nodes that count, with their heartbeats. While
// membership is frozen (this node's heartbeats fail, so its lease view may
// be as stale as its node view) the membership leases are not asked for.
func (m *Manager) membersLocked(now time.Time) map[string]heartbeat {
	frozen := m.membershipFrozen(now)
	out := make(map[string]heartbeat, len(m.nodes.m))
	for name, e := range m.nodes.m {
		if !frozen && m.nodeGoneLocked(e, now) {
			continue
		}
		hb, ok := m.heartbeatLocked(name, e)
		if !ok {
			continue
		}
		if name != m.cfg.Node && !frozen && !m.holdsMembershipLocked(name) {
			continue
		}
		out[name] = hb
	}
	return out
}

// heartbeatLocked decodes node name's heartbeat; a bad one is logged once
// per revision and does not count.
func (m *Manager) heartbeatLocked(name string, e entry) (heartbeat, bool) {
	var hb heartbeat
	err := json.Unmarshal(e.value, &hb)
	why := ""
	switch {
	case err != nil:
		why = "does not decode: " + err.Error()
	case hb.Node != name:
		why = "names another node: " + hb.Node
	case hb.Cores < 0 || hb.Cores > maxCores:
		why = "claims an impossible number of cores"
	}
	if why == "" {
		return hb, true
	}
	if m.badRecords[name] != e.rev {
		m.badRecords[name] = e.rev
		m.log.Error("lease: skipping a heartbeat record that is not an mlstream node's", "bucket", NodesBucket, "key", name, "revision", e.rev, "why", why)
	}
	return hb, false
}

// holdsMembershipLocked tells whether node holds its membership lease.
func (m *Manager) holdsMembershipLocked(node string) bool {
	e, ok := m.leases.m[memberKey(node)]
	return ok && decodeLease(e).Node == node
}

// memberNames is the sorted names of members.
func memberNames(members map[string]heartbeat) []string {
	return slices.Sorted(maps.Keys(members))
}

// leaseLocked decodes the lease record of key; one that does not decode
// or names no node is logged once per revision and is nobody's: the
// key's desired owner deletes it and takes the key.
func (m *Manager) leaseLocked(key string, e entry) (leaseValue, bool) {
	var v leaseValue
	err := json.Unmarshal(e.value, &v)
	if err == nil && v.Node != "" {
		if v.Token == 0 {
			v.Token = e.rev
		}
		return v, true
	}
	if m.badRecords["lease "+key] != e.rev {
		m.badRecords["lease "+key] = e.rev
		m.log.Error("lease: skipping a lease record that is not an mlstream node's", "bucket", LeasesBucket, "key", key, "revision", e.rev)
	}
	return v, false
}
