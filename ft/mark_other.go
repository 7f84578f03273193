//go:build !unix

package ft

import (
	"errors"
	"os"
)

// mapMark has no shared mapping to use on this platform: the mark is
// rewritten with a write at every request.
func mapMark(*os.File) ([]byte, error) { return nil, errors.ErrUnsupported }

func unmapMark([]byte) error { return nil }
