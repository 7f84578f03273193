package runtime

import (
	"encoding/json"
	"strings"
	"testing"
)

type testSection struct {
	Topk *struct{ Total int } `json:"topk,omitempty"`
	N    int                  `json:"n"`
}

// A kind's section is one field in Go and its own fields at the top level
// of the JSON; decoded, it comes back as raw fields that SectionAs reads.
func TestStatusSectionIsInlined(t *testing.T) {
	st := JobStatus{Name: "j", Kind: "k", Section: &testSection{N: 7}}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["n"] != 7.0 || m["name"] != "j" || strings.Contains(string(b), "Section") {
		t.Fatalf("status %s", b)
	}
	if _, ok := m["topk"]; ok {
		t.Fatalf("omitempty field of the section encoded: %s", b)
	}
	if got, ok := SectionAs[*testSection](st); !ok || got.N != 7 {
		t.Fatalf("SectionAs in process: %+v %v", got, ok)
	}
	var back JobStatus
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Name != "j" || back.Kind != "k" {
		t.Fatalf("engine fields %+v", back)
	}
	raw, ok := back.Section.(map[string]json.RawMessage)
	if !ok || len(raw) != 1 || string(raw["n"]) != "7" {
		t.Fatalf("decoded section %#v", back.Section)
	}
	if got, ok := SectionAs[*testSection](back); !ok || got.N != 7 {
		t.Fatalf("SectionAs from JSON: %+v %v", got, ok)
	}
	again, _ := json.Marshal(back)
	if string(again) != string(b) {
		t.Fatalf("round trip:\n%s\n%s", b, again)
	}
	if _, err := json.Marshal(JobStatus{Kind: "k", Section: []int{1}}); err == nil {
		t.Fatal("a section that is not an object was encoded")
	}
	if b, err := json.Marshal(JobStatus{Kind: "k"}); err != nil || strings.Contains(string(b), "null}") {
		t.Fatalf("no section: %s %v", b, err)
	}
}
