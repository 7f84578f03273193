package logreg

import (
	"strconv"

	"github.com/mlstream/mlstream/runtime"
)

// TypePrediction is the message of one prediction: every event a logreg
// job processes, labelled (progressive validation: predicted, then
// learned) or not.
const TypePrediction = "prediction"

// Prediction is a prediction message: ts and seq are the event's, label
// is present when the event had one, model_version is the global model's
// version when the partition predicted.
type Prediction struct {
	runtime.Envelope
	Key string `json:"key"`
	// ID is there when the event is held for a delayed label.
	ID           string  `json:"id,omitempty"`
	P            float64 `json:"p"`
	Label        *int    `json:"label,omitempty"`
	ModelVersion uint64  `json:"model_version"`
	Seq          uint64  `json:"seq"`
}

// AppendPrediction encodes a prediction message without reflection: this
// runs once per event while someone watches.
func AppendPrediction(b []byte, job string, r *runtime.Record, p float64, version uint64) []byte {
	b = runtime.AppendEnvelope(b, TypePrediction, job, r.TS)
	b = append(b, `,"key":`...)
	b = runtime.AppendJSONString(b, messageKey(r))
	if len(r.Values) > 0 {
		b = append(b, `,"id":`...)
		b = runtime.AppendJSONString(b, r.Values[0])
	}
	b = append(b, `,"p":`...)
	b = strconv.AppendFloat(b, p, 'g', 6, 64)
	if r.Label >= 0 {
		b = append(b, `,"label":`...)
		b = strconv.AppendInt(b, int64(r.Label), 10)
	}
	b = append(b, `,"model_version":`...)
	b = strconv.AppendUint(b, version, 10)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, r.Seq, 10)
	return append(b, '}')
}
