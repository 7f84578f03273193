package api

import (
	"fmt"
	"net/http"
	"testing"
)

// GET /v1/whoami names the scopes of the request's token (the dashboard
// refuses an admin one); a token without read, or none, is refused as on
// any read route; a service without tokens says so.
func TestWhoAmINamesTheTokensScopes(t *testing.T) {
	ts := newTestServer(t, threeTokens(t))
	for _, c := range []struct {
		tok  string
		code int
		want string
	}{
		{adminTok, http.StatusOK, "[admin]"},
		{readTok, http.StatusOK, "[read]"},
		{ingestTok, http.StatusForbidden, ""},
		{"", http.StatusUnauthorized, ""},
	} {
		ts.token = c.tok
		code, _, body := ts.do("GET", "/v1/whoami", "", nil)
		if code != c.code || (c.want != "" && (fmt.Sprint(body["scopes"]) != c.want || body["auth"] != true)) {
			t.Errorf("token %q: %d %v, want %d with scopes %s", c.tok, code, body, c.code, c.want)
		}
	}
	open := newTestServer(t)
	if code, _, body := open.do("GET", "/v1/whoami", "", nil); code != http.StatusOK || body["auth"] != false || fmt.Sprint(body["scopes"]) != "[]" {
		t.Errorf("without tokens: %d %v, want auth false and no scopes", code, body)
	}
}
