package client_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/kinds/logreg"
	"github.com/mlstream/mlstream/runtime"
)

// A drift message as the server encodes it decodes into the client's
// DriftMessage field by field.
func TestDriftMessageDecodes(t *testing.T) {
	sent := logreg.Drift{Envelope: runtime.Envelope{Type: logreg.TypeDrift, Job: "spam", TS: 1700000000000},
		Partition: 1, Seq: 42, Events: 20000, Drifts: 3, OnDrift: "none"}
	raw, err := json.Marshal(sent)
	if err != nil {
		t.Fatal(err)
	}
	var m client.Message
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m.Raw = raw
	got, err := m.Drift()
	if err != nil {
		t.Fatal(err)
	}
	want := client.DriftMessage{Partition: 1, Seq: 42, Events: 20000, Drifts: 3, OnDrift: "none"}
	if !reflect.DeepEqual(got, want) || m.Type != client.TypeDrift || m.Job != "spam" {
		t.Fatalf("decoded %+v (%s %s), want %+v", got, m.Type, m.Job, want)
	}
}
