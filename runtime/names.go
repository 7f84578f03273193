package runtime

import (
	"fmt"
	"unicode/utf8"
)

// MaxNameBytes is the longest job or stream name, in bytes.
const MaxNameBytes = 64

// CheckName reports why s is not a valid job or stream name, or nil. A
// name is 1 to MaxNameBytes bytes of ASCII letters, digits, '_', '-' and
// '.', starting with a letter or digit: it is used as a file name in the data
// directory (so never "." or ".." or hidden), as a URL path segment and as
// a metric label, and needs no escaping in any of them.
func CheckName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("required: 1-%d letters, digits, '_', '-' or '.'", MaxNameBytes)
	case !utf8.ValidString(s):
		return fmt.Errorf("not valid UTF-8: %q", s)
	case len(s) > MaxNameBytes:
		return fmt.Errorf("must be at most %d bytes, got %d", MaxNameBytes, len(s))
	case !alnum(rune(s[0])):
		return fmt.Errorf("must start with a letter or digit, got %q", s)
	}
	for i, r := range s {
		if !nameChar(r) {
			return fmt.Errorf("must be letters, digits, '_', '-' or '.'; got %q at byte %d of %q", r, i, s)
		}
	}
	return nil
}

func alnum(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' }

func nameChar(r rune) bool { return alnum(r) || r == '_' || r == '-' || r == '.' }
