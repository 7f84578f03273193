package client_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/runtime"
)

// Every field of the client's answer types names a key the server sends:
// a field renamed on one side would otherwise decode as zero, silently.
func TestTypesMatchServerAnswers(t *testing.T) {
	srv, _ := startServer(t, runtime.Config{}, nil)
	c := newClient(t, srv.http.URL, client.Config{})
	ctx := t.Context()
	for _, spec := range []client.JobSpec{
		{Name: "spam", Kind: "logreg", Input: "mail", Params: map[string]any{"hash_bits": 12}},
		{Name: "words", Kind: "heavy_hitters", Input: "mail", Params: map[string]any{"field": "features"}},
		{Name: "users", Kind: "distinct", Input: "mail", Params: map[string]any{"field": "key"}},
		{Name: "conv", Kind: "join", Left: "mail", Right: "clicks", Params: map[string]any{"on": "key", "within": "1m", "value": "amount", "value_side": "right"}},
	} {
		if _, err := c.PutJob(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UnixMilli()
	if _, err := c.PostEvents(ctx, "mail", events(0, 50)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PostEvents(ctx, "clicks", fmt.Appendf(nil, `{"key":"k3","ts":%d,"amount":2}`, now)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the join's match", 10*time.Second, func() bool {
		m, err := c.Matches(ctx, "conv", client.WindowAll, 0)
		return err == nil && m.Matches == 1 && m.Estimate != nil
	})
	get := func(path string) []byte {
		resp, err := http.Get(srv.http.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return b
	}
	for _, tc := range []struct {
		path string
		typ  any
	}{
		{"/v1/jobs/spam", client.JobStatus{}},
		{"/v1/jobs/words", client.JobStatus{}},
		{"/v1/jobs/spam/model?weights=true", client.Model{}},
		{"/v1/jobs/words/topk", client.TopK{}},
		{"/v1/jobs/users/distinct", client.Distinct{}},
		{"/v1/jobs/conv/matches?window=all", client.Matches{}},
	} {
		for _, miss := range missingKeys(reflect.TypeOf(tc.typ), get(tc.path), "") {
			t.Errorf("GET %s has no %s (%T)", tc.path, miss, tc.typ)
		}
	}
	pred, err := c.Predict(ctx, "spam", map[string]any{"key": "a", "features": []string{"x"}})
	if err != nil || len(pred.Predictions) != 1 || pred.Predictions[0].Key != "a" || pred.Job != "spam" {
		t.Errorf("predict: %+v, %v", pred, err)
	}
}

// missingKeys lists the JSON keys of struct type typ (those not marked
// omitempty, and nested ones of values present) that raw, an object, lacks.
func missingKeys(typ reflect.Type, raw []byte, prefix string) []string {
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
		typ = typ.Elem()
		if len(raw) > 0 && raw[0] == '[' {
			var elems []json.RawMessage
			if json.Unmarshal(raw, &elems) != nil || len(elems) == 0 {
				return nil
			}
			raw = elems[0]
		}
	}
	var obj map[string]json.RawMessage
	if typ.Kind() != reflect.Struct || json.Unmarshal(raw, &obj) != nil || typ == reflect.TypeOf(time.Time{}) {
		return nil
	}
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		v, ok := obj[name]
		if !ok {
			if !strings.Contains(opts, "omitempty") {
				out = append(out, prefix+name)
			}
			continue
		}
		if string(v) != "null" {
			out = append(out, missingKeys(f.Type, v, prefix+name+".")...)
		}
	}
	return out
}
