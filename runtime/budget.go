package runtime

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Ranges of job spec fields and params. Ranges keep one field from
// asking for more than the machine has; within them, the memory budget
// (Config.MaxMemory) decides.
const (
	// MaxPartitions is the most partitions a job may have.
	MaxPartitions = 256
	// MaxQueueSize is the largest partition queue, in events.
	MaxQueueSize = 1 << 20

	maxFTEvents     = 1 << 30
	maxCompactEvery = 1024
	maxFTWindow     = 1 << 40
	maxParamString  = 256
	maxStaleness    = 1 << 20
)

// Bytes behind the estimates, measured on amd64 (see budget_test.go).
const (
	// queuedEventBytes is a queued event: its Record (96 bytes) and
	// what extraction copied (a few features or values).
	queuedEventBytes = 192
)

// MemoryEstimate is a job's memory, estimated from its spec before
// anything is allocated: the kind's state at its largest (models, every
// window kept, a bound on buffered state: Kind.Memory) and its queues
// full.
type MemoryEstimate struct {
	State  int64 `json:"state_bytes"`
	Queues int64 `json:"queue_bytes"`
	// Field is the spec field that weighs most, named in refusals.
	Field string `json:"field"`
}

// Total is state and queues.
func (m MemoryEstimate) Total() int64 { return m.State + m.Queues }

// estimateMemory estimates spec's memory: the kind's (Kind.Memory) and the
// queues'. spec must be validated (its
// partitions and queue size filled); its params are read with the ranges
// of the kind's constructor, so a param out of range is a SpecError here
// already, before the budget is asked. withFT says whether the job will
// have fault tolerance.
func estimateMemory(spec Spec, withFT bool) (MemoryEstimate, error) {
	var state int64
	var field string
	if kind, ok := lookupKind(spec.Kind); ok && kind.Memory != nil {
		var err error
		if state, field, err = kind.Memory(spec, newParams(spec.Params), withFT); err != nil {
			return MemoryEstimate{}, err
		}
	}
	m := MemoryEstimate{State: state, Queues: int64(spec.Partitions) * int64(spec.QueueSize) * queuedEventBytes, Field: field}
	if m.Queues > m.State {
		m.Field = "queue_size"
	}
	return m, nil
}

// Errors of the limits, matched with errors.Is by the api package.
var (
	ErrMemoryBudget = errors.New("runtime: the job would exceed the memory budget")
	ErrTooManyJobs  = errors.New("runtime: the engine runs as many jobs as it may")
)

// BudgetError refuses a job whose memory estimate does not fit in what
// the budget has left.
type BudgetError struct {
	Job      string
	Estimate MemoryEstimate
	Budget   int64 // Config.MaxMemory
	InUse    int64 // the running jobs' estimates
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("job %q needs an estimated %s (%s of state, %s of queues; %s weighs most), but the memory budget of %s has %s left (%s in use by the running jobs)",
		e.Job, fmtBytes(e.Estimate.Total()), fmtBytes(e.Estimate.State), fmtBytes(e.Estimate.Queues), e.Estimate.Field,
		fmtBytes(e.Budget), fmtBytes(max(e.Budget-e.InUse, 0)), fmtBytes(e.InUse))
}

func (e *BudgetError) Unwrap() error { return ErrMemoryBudget }

// fmtBytes writes n in the largest binary unit that keeps it at least 1.
func fmtBytes(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	f, i := float64(n)/1024, 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + units[i:i+1] + "iB"
}

// defaultMaxMemory is half the memory the process may use: the machine's
// (MemTotal of /proc/meminfo) or its cgroup's limit, whichever is less.
// 0 when neither can be read (no budget).
func defaultMaxMemory() int64 {
	limit := memTotal()
	if c := cgroupLimit(); c > 0 && (limit == 0 || c < limit) {
		limit = c
	}
	return limit / 2
}

func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// MemTotal:       24684084 kB
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && fields[0] == "MemTotal:" && fields[2] == "kB" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// cgroupLimit reads the memory limit of cgroup v2, then v1; 0 when there
// is none ("max", or v1's huge "unlimited" value).
func cgroupLimit() int64 {
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(data)), 10, 64)
		if err == nil && n > 0 && n < 1<<60 {
			return n
		}
	}
	return 0
}
