//go:build !amd64

package learners

// addAB adds da to word A and db to word B of the slot at base.
func (m *Model) addAB(base int, da, db float64) { m.addFloats(base, da, db) }
