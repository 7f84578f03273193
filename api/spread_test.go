package api

import "testing"

// Hot-key spreading through the API: a good spec shows in the job's skew
// status once keys are hot; a bad one is a 400 naming the field.
func TestSpreadSpecThroughTheAPI(t *testing.T) {
	ts := newTestServer(t)
	for _, c := range []struct{ spec, field string }{
		{`{"kind":"heavy_hitters","input":"s","params":{"field":"f"},"spread":{"above":0.9}}`, "spread.above"},
		{`{"kind":"heavy_hitters","input":"s","params":{"field":"f"},"spread":{"share":0.1}}`, "share"}, // named alone, as the validator names unknown fields
		{`{"kind":"join","left":"a","right":"b","params":{"on":"k","window":"1s"},"spread":{}}`, "spread"},
	} {
		code, _, body := ts.do("PUT", "/v1/jobs/bad", "application/json", []byte(c.spec))
		if code != 400 || body["field"] != c.field {
			t.Errorf("%s: %d %v, want 400 on %s", c.spec, code, body, c.field)
		}
	}
	code, _, body := ts.do("PUT", "/v1/jobs/hh", "application/json",
		[]byte(`{"kind":"heavy_hitters","input":"s","partitions":4,"params":{"field":"f"},"spread":{"above":0.2}}`))
	if code != 201 {
		t.Fatalf("PUT: %d %v", code, body)
	}
	var lines []byte
	for i := range 4000 {
		key := "hot"
		if i%2 == 1 {
			key = "k" + string(rune('a'+i%26))
		}
		lines = append(lines, `{"key":"`+key+`","f":"x"}`+"\n"...)
	}
	if code, _, body := ts.do("POST", "/v1/streams/s/events", "application/x-ndjson", lines); code != 202 {
		t.Fatalf("ingest: %d %v", code, body)
	}
	_, _, st := ts.do("GET", "/v1/jobs/hh", "", nil)
	spread, _ := st["elastic"].(map[string]any)["skew"].(map[string]any)["spread"].(map[string]any)
	if spread == nil || spread["above"] != 0.2 {
		t.Fatalf("status elastic.skew.spread = %v", spread)
	}
	if keys, _ := spread["keys"].([]any); len(keys) != 1 || keys[0] != "hot" {
		t.Fatalf("hot keys %v, want [hot]", spread["keys"])
	}
}
