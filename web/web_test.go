package web

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, srv *httptest.Server, path string) string {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	return string(b)
}

// The page and every file it names are served from the binary.
func TestServesPageAndAssets(t *testing.T) {
	srv := httptest.NewServer(Handler(http.NotFoundHandler()))
	defer srv.Close()
	page := get(t, srv, "/")
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(page, -1)
	if len(refs) < 4 {
		t.Fatalf("the page names %d assets", len(refs))
	}
	for _, m := range refs {
		ref := m[1]
		if strings.HasPrefix(ref, "data:") || strings.HasPrefix(ref, "#") {
			continue
		}
		if strings.Contains(ref, "//") {
			t.Errorf("the page loads %s from outside the service", ref)
			continue
		}
		if get(t, srv, "/"+ref) == "" {
			t.Errorf("%s is empty", ref)
		}
	}
}

// Nothing is fetched from outside the service: no file names another
// host, except the vendored library's licence comment.
func TestNoExternalURLs(t *testing.T) {
	external := regexp.MustCompile(`(?:https?:|wss?:)?//[a-zA-Z0-9.-]+\.[a-z]{2,}`)
	err := fs.WalkDir(files, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, "LICENSE") {
			return err
		}
		b, err := files.ReadFile(path)
		if err != nil {
			return err
		}
		text := string(b)
		if strings.HasPrefix(text, "/*!") {
			text = text[strings.Index(text, "*/")+2:] // the library's banner
		}
		for _, u := range external.FindAllString(text, -1) {
			t.Errorf("%s names %s", path, u)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
