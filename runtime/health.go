package runtime

import (
	"fmt"
	"strconv"
	"strings"
)

// Health is a job's verdict, JobStatus.Health: "ok" only when nothing the
// engine can see is wrong, else "warn" with a reason per problem. The
// dashboard's badge shows it (beside what only the page can judge: its
// own connection and the feed's freshness).
type Health struct {
	Status  string         `json:"status"` // ok or warn
	Reasons []HealthReason `json:"reasons,omitempty"`
}

// HealthReason is one problem. Code is stable for programs
// ("coordination", "unowned"); Text is short, for a badge; Why says what
// is wrong and what to change.
type HealthReason struct {
	Code string `json:"code"`
	Text string `json:"text"`
	Why  string `json:"why"`
}

// Owning is a Cluster that knows which of a job's partitions no node
// holds: a job with such partitions is not ok. Partition -1 is a
// shared-model job's global unit.
type Owning interface {
	Unowned(job string) []int
}

// coordWindow is how many seconds of samples the coordination overhead
// must stay above its bound, groups being measured, before an auto group
// that is still below sync.max_group counts as failing: the controller
// doubles the group at each group above the bound, so a few seconds is
// long enough for it to have brought the overhead down if it could.
const coordWindow = 5

func (j *Job) health(cur *GroupStatus) Health {
	h := Health{Status: "ok"}
	if r := coordinationHealth(cur, j.samples.groups(coordWindow), j.spec.Sync.MaxGroup); r != nil {
		h.Reasons = append(h.Reasons, *r)
	}
	if o, ok := j.cluster.(Owning); ok {
		if r := unownedHealth(o.Unowned(j.spec.Name)); r != nil {
			h.Reasons = append(h.Reasons, *r)
		}
	}
	if len(h.Reasons) > 0 {
		h.Status = "warn"
	}
	return h
}

// coordinationHealth judges the job's coordination overhead: cur is its
// group status now, recent its last samples, oldest first. The overhead is
// past its bound when the groups measured over the last coordWindow
// seconds spent more than high of their time coordinating: the window's
// share, not the last group's alone (a job whose groups mostly end on an
// empty queue measures one now and then; one dear group among cheap ones
// is no trouble), whether the controller grew the group meanwhile or not.
// Until a window is measured (a new job, an idle one), the last group
// judges a group the controller cannot grow: fixed, or at max_group.
func coordinationHealth(cur *GroupStatus, recent []*GroupStatus, maxGroup int) *HealthReason {
	if cur == nil {
		return nil
	}
	share, measured := cur.Overhead, false
	if len(recent) > coordWindow {
		share, measured = windowOverhead(recent)
	}
	if !measured {
		share = cur.Overhead
	}
	if share <= cur.High {
		return nil
	}
	head := fmt.Sprintf("coordination %s > %s", shareText(share), shareText(cur.High))
	over := "the last group's"
	if measured {
		over = fmt.Sprintf("over the last %d s, the groups'", coordWindow)
	}
	r := &HealthReason{Code: "coordination", Text: head}
	switch {
	case cur.Mode == "fixed":
		r.Why = fmt.Sprintf("%s (%s) at the fixed group size %s: raise sync.every or set it to \"auto\"", head, over, sizeText(cur.Size))
	case maxGroup > 0 && cur.Size >= 0.95*float64(maxGroup):
		r.Why = fmt.Sprintf("%s (%s) at max group %d: the job's batches are tiny; raise sync.max_group or send bigger requests", head, over, maxGroup)
	case measured:
		first, last := recent[0], recent[len(recent)-1]
		grew := ""
		if last.Size > first.Size {
			grew = fmt.Sprintf(", while the group grew from %s to %s batches", sizeText(first.Size), sizeText(last.Size))
		}
		r.Why = fmt.Sprintf("%s (%s)%s: coordinating costs more than the work between, and groups also end at sync.max_delay; raise sync.max_delay or send bigger requests",
			head, over, grew)
	default:
		return nil // an auto group still adapting
	}
	return r
}

// windowOverhead is the share of the measured groups' time spent
// coordinating between the first sample and the last; measured is false
// when no group was (an idle job's last overhead is old news).
func windowOverhead(recent []*GroupStatus) (share float64, measured bool) {
	first, last := recent[0], recent[len(recent)-1]
	if first == nil || last == nil || last.Groups <= first.Groups {
		return 0, false
	}
	c, w := last.coordNs-first.coordNs, last.workNs-first.workNs
	if c < 0 || w < 0 || c+w <= 0 {
		return 0, false
	}
	return float64(c) / float64(c+w), true
}

// unownedHealth names the partitions no node holds.
func unownedHealth(parts []int) *HealthReason {
	if len(parts) == 0 {
		return nil
	}
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = strconv.Itoa(p)
		if p < 0 {
			names[i] = "the global unit"
		}
	}
	text := "partition " + names[0] + " has no owner"
	if len(parts) > 1 {
		text = strconv.Itoa(len(parts)) + " partitions have no owner"
	}
	return &HealthReason{Code: "unowned", Text: text,
		Why: "no node holds the lease of " + strings.Join(names, ", ") + ": its events wait in the cluster's log, unprocessed, until a node takes it over (its owner stopped and the lease expires after --lease-ttl, or no node is free to take it)"}
}

// shareText formats a share as the dashboard does: 0.0123 is "1.2%", 0.48 "48%".
func shareText(x float64) string {
	if x < 0.1 && x > -0.1 {
		return strconv.FormatFloat(100*x, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(100*x, 'f', 0, 64) + "%"
}

// sizeText formats a group size: whole, or with one decimal (a job's is a mean).
func sizeText(x float64) string {
	return strconv.FormatFloat(sig3(x), 'f', -1, 64)
}
