package heavyhitters

import "github.com/mlstream/mlstream/runtime"

// TypeTopK is the message of a changed top k: the current window's, at
// most once a second, when its items or their order changed.
const TypeTopK = "topk"

// TopKMessage is a topk message; ts is when it was published.
type TopKMessage struct {
	runtime.Envelope
	TopK TopK `json:"topk"`
}
