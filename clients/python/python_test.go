// Package python_test runs the Python client's tests (clients/python/tests)
// with Debian's Python, so that `go test ./...` covers the client too.
package python_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// python is Debian's interpreter: the one with python3-pytest and
// python3-websockets installed, whatever python3 is first on PATH.
const python = "/usr/bin/python3"

func TestPythonClient(t *testing.T) {
	requirePython(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	readInputs(t, root)
	cmd := exec.Command(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "clients/python/tests")
	cmd.Dir = root
	// No __pycache__ left in the work tree.
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("%s -m pytest -q clients/python/tests:\n%s", python, out)
	if err != nil {
		t.Fatalf("pytest failed: %v", err)
	}
}

// requirePython skips when Debian's Python lacks what the tests need,
// except under CI, where a missing package must not pass as a skip.
func requirePython(t *testing.T) {
	t.Helper()
	out, err := exec.Command(python, "-c", "import pytest, websockets").CombinedOutput()
	if err == nil {
		return
	}
	msg := "the Python client's tests need " + python + " with pytest and websockets " +
		"(apt-get install -y python3-pytest python3-websockets): " + strings.TrimSpace(err.Error()+"\n"+string(out))
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// readInputs opens every file the Python tests depend on (the client, its
// tests, the docs page, the Go sources of the binary they build, the data
// set): go test caches a result only as long as the files the test opened
// are unchanged, and it cannot see what the Python subprocess reads.
func readInputs(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "__pycache__" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if !isInput(rel) {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		return f.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func isInput(rel string) bool {
	rel = filepath.ToSlash(rel)
	switch {
	case strings.HasSuffix(rel, ".go"), rel == "go.mod", rel == "go.sum":
		return true
	case strings.HasPrefix(rel, "clients/python/"), rel == "docs/python.md":
		return true
	case rel == "benchmarks/data/breast_cancer.ndjson":
		return true
	case strings.HasPrefix(rel, "web/"): // embedded in the binary
		return true
	}
	return false
}
