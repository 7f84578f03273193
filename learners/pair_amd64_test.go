package learners

import "testing"

// Where the processor lacks CMPXCHG16B, addAB's two compare-and-swaps
// keep the same promises.
func TestAddABWithoutCX16(t *testing.T) {
	defer func(had bool) { hasCX16 = had }(hasCX16)
	hasCX16 = false
	checkAddAB(t)
}
