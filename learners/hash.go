package learners

import "github.com/cespare/xxhash/v2"

// Feature is one hashed input: Hash is the 64-bit xxhash of the feature name
// (see HashName and HashNameValue) and Value its value. A feature with value 0
// has no effect and is skipped.
type Feature struct {
	Hash  uint64
	Value float64
}

// HashName returns the hash of a numeric, boolean or bag-of-words feature
// name: xxhash.Sum64String(name).
func HashName(name string) uint64 { return xxhash.Sum64String(name) }

// HashNameValue returns the hash of the one-hot feature "name=value", the
// same as HashName(name+"="+value), without allocating.
func HashNameValue(name, value string) uint64 {
	var d xxhash.Digest
	d.Reset()
	d.WriteString(name)
	d.WriteString("=")
	d.WriteString(value)
	return d.Sum64()
}
