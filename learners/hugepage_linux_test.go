package learners

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// TestTableAdvisedHuge: the default model's table (32 MiB) is madvised for
// transparent huge pages over its whole 2 MiB-aligned interior, as the
// kernel sees it (the VMAs' VmFlags carry "hg"). Whether the kernel then
// backs them with huge pages depends on its settings and free memory, so
// the test logs AnonHugePages rather than asserting it.
func TestTableAdvisedHuge(t *testing.T) {
	m, err := NewModel(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(m.state); i += 512 { // touch every 4 KiB page
		m.state[i] = 0
	}
	const huge = 2 << 20
	start := uintptr(unsafe.Pointer(unsafe.SliceData(m.state)))
	lo := (start + huge - 1) &^ (huge - 1)
	hi := (start + uintptr(len(m.state)*8)) &^ (huge - 1)
	vmas, err := readSmaps(lo, hi)
	if err != nil {
		t.Skip("no /proc/self/smaps:", err)
	}
	var advised, anonHuge uintptr
	for _, v := range vmas {
		if v.hugeFlag {
			advised += min(v.hi, hi) - max(v.lo, lo)
		}
		anonHuge += v.anonHugeKB << 10
	}
	if advised != hi-lo {
		t.Fatalf("%d of the table's %d aligned bytes advised for huge pages", advised, hi-lo)
	}
	t.Logf("table %d MiB, aligned interior %d MiB advised, AnonHugePages %d MiB", len(m.state)*8>>20, (hi-lo)>>20, anonHuge>>20)
}

// vma is one mapping of /proc/self/smaps.
type vma struct {
	lo, hi     uintptr
	hugeFlag   bool // VmFlags has hg (MADV_HUGEPAGE)
	anonHugeKB uintptr
}

// readSmaps returns the mappings overlapping [lo, hi).
func readSmaps(lo, hi uintptr) ([]vma, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []vma
	var cur *vma
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var a, b uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &a, &b); n == 2 {
			cur = nil
			if a < hi && lo < b {
				out = append(out, vma{lo: a, hi: b})
				cur = &out[len(out)-1]
			}
			continue
		}
		if cur == nil {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "VmFlags:"); ok {
			cur.hugeFlag = strings.Contains(" "+rest+" ", " hg ")
		}
		if rest, ok := strings.CutPrefix(line, "AnonHugePages:"); ok {
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &cur.anonHugeKB)
		}
	}
	return out, sc.Err()
}
