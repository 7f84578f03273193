package runtime

import "github.com/mlstream/mlstream/internal/names"

// MaxNameBytes is the longest job or stream name, in bytes.
const MaxNameBytes = 64

// CheckName reports why s is not a valid job or stream name, or nil. A
// name is 1 to MaxNameBytes bytes of ASCII letters, digits, '_', '-' and
// '.', starting with a letter or digit: it is used as a file name in the data
// directory (so never "." or ".." or hidden), as a URL path segment and as
// a metric label, and needs no escaping in any of them.
func CheckName(s string) error { return names.Check(s, MaxNameBytes) }
