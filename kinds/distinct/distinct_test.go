package distinct

import (
	"fmt"
	"testing"

	"github.com/mlstream/mlstream/kinds/internal/synopsis"
	"github.com/mlstream/mlstream/learners"
	"github.com/mlstream/mlstream/runtime"
	"github.com/mlstream/mlstream/synopses"
)

func newPart(t *testing.T) *part {
	t.Helper()
	sk, err := synopses.NewWindowedDistinct(12, synopsis.WholeStream, 1)
	if err != nil {
		t.Fatal(err)
	}
	p := &part{}
	p.Sketch = sk
	return p
}

// Records of item logs written before values were hashed, which carry the
// values, count as the hashed records of the same values do.
func TestValuesAndHashesCountAlike(t *testing.T) {
	var values, hashes []runtime.Record
	for i := range 5000 {
		v := fmt.Sprintf("user-%d", i%1500)
		values = append(values, runtime.Record{Seq: uint64(i + 1), TS: 1, Label: -1, Values: []string{v}})
		hashes = append(hashes, runtime.Record{Seq: uint64(i + 1), TS: 1, Label: -1, Features: []learners.Feature{{Hash: learners.HashName(v), Value: 1}}})
	}
	a, b := newPart(t), newPart(t)
	a.Process(values, false)
	b.Process(hashes, false)
	_, sa := a.Sketch.Current()
	_, sb := b.Sketch.Current()
	if sa.Estimate() != sb.Estimate() || sa.Estimate() < 1400 || sa.Estimate() > 1600 {
		t.Errorf("estimates %d from values, %d from hashes; 1500 distinct", sa.Estimate(), sb.Estimate())
	}
	if a.AlphaOf() != 1 || b.AlphaOf() != 1 {
		t.Errorf("α %v from values, %v from hashes; want 1", a.AlphaOf(), b.AlphaOf())
	}
}

// α, the most one event moves the sketch, counts an event's hashed values.
func TestAlphaCountsHashedValues(t *testing.T) {
	p := newPart(t)
	three := []learners.Feature{{Hash: 1, Value: 1}, {Hash: 2, Value: 1}, {Hash: 3, Value: 1}}
	p.Process([]runtime.Record{{Seq: 1, TS: 1, Label: -1, Features: three}}, false)
	if p.AlphaOf() != 3 {
		t.Errorf("α = %v after an event of 3 values, want 3", p.AlphaOf())
	}
}
