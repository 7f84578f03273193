package all_test

import (
	"bytes"
	"testing"

	"github.com/mlstream/mlstream/runtime"
)

// RescaleUnits (a cluster's rescale) runs every kind that can rescale on
// instances without an engine: each unit of the new layout backs up, and
// the new units cover the new partitions.
func TestRescaleUnitsOfEveryKind(t *testing.T) {
	specs := []runtime.Spec{
		{Name: "spam", Kind: "logreg", Input: "mail", Params: map[string]any{"hash_bits": 12}},
		{Name: "top", Kind: "heavy_hitters", Input: "clicks", Params: map[string]any{"field": "item"}},
		{Name: "users", Kind: "distinct", Input: "clicks", Params: map[string]any{"field": "user"}},
		{Name: "pairs", Kind: "join", Left: "clicks", Right: "views", Params: map[string]any{"on": "user", "within": "1m"}},
	}
	for _, spec := range specs {
		for _, step := range [][2]int{{4, 2}, {2, 5}} {
			spec.Partitions = step[0]
			covered := map[int]bool{}
			err := runtime.RescaleUnits(spec, step[1], func(runtime.Unit) error { return nil }, func(u runtime.Unit) error {
				for _, p := range u.Partitions() {
					covered[p] = true
				}
				var b bytes.Buffer
				return u.BackupState(&b, true)
			})
			if err != nil {
				t.Fatalf("%s %d → %d: %v", spec.Kind, step[0], step[1], err)
			}
			if len(covered) != step[1] {
				t.Errorf("%s %d → %d: the new units cover partitions %v", spec.Kind, step[0], step[1], covered)
			}
		}
	}
}
