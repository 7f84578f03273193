package distinct

import "github.com/mlstream/mlstream/runtime"

// TypeDistinct is the message of a changed count: the current window's,
// at most once a second, when its estimate changed.
const TypeDistinct = "distinct"

// CountMessage is a distinct message; ts is when it was published.
type CountMessage struct {
	runtime.Envelope
	Distinct Count `json:"distinct"`
}
