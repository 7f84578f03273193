// Package names checks the syntax of job and stream names, which the
// engine accepts and the fault-tolerance store turns into directory names:
// 1 to max bytes of ASCII letters, digits, '_', '-' and '.', starting with
// a letter or digit, so never "." or ".." or hidden, and needing no
// escaping as a file name, a URL path segment or a metric label.
package names

import (
	"fmt"
	"unicode/utf8"
)

// Check reports why s is not a name of at most max bytes, or nil.
func Check(s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("required: 1-%d letters, digits, '_', '-' or '.'", max)
	case !utf8.ValidString(s):
		return fmt.Errorf("not valid UTF-8: %q", s)
	case len(s) > max:
		return fmt.Errorf("must be at most %d bytes, got %d", max, len(s))
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
