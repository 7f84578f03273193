package all_test

import (
	"go/build"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	_ "github.com/mlstream/mlstream/kinds/all"
	"github.com/mlstream/mlstream/runtime"
)

const module = "github.com/mlstream/mlstream"

func TestTheFourKindsRegister(t *testing.T) {
	if got, want := runtime.Kinds(), []string{"distinct", "heavy_hitters", "join", "logreg"}; !slices.Equal(got, want) {
		t.Fatalf("kinds %v, want %v", got, want)
	}
}

// The engine and the API import no kind: arrows run from the kinds to the
// engine, never back.
func TestEngineImportsNoKind(t *testing.T) {
	root := filepath.Join("..", "..")
	seen := map[string]bool{}
	var walk func(path, via string)
	walk = func(path, via string) {
		if seen[path] || !strings.HasPrefix(path, module) {
			return
		}
		seen[path] = true
		if strings.HasPrefix(path, module+"/kinds") {
			t.Errorf("%s imports %s", via, path)
			return
		}
		pkg, err := build.ImportDir(filepath.Join(root, strings.TrimPrefix(path, module)), 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range pkg.Imports {
			walk(imp, path)
		}
	}
	walk(module+"/runtime", "")
	walk(module+"/api", "")
	if len(seen) < 3 {
		t.Fatalf("walked only %v", seen)
	}
}

// No source file of the engine names a kind in a string: what differs
// between kinds is in their Kind and their packages.
func TestEngineNamesNoKind(t *testing.T) {
	dir := filepath.Join("..", "..", "runtime")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	names := regexp.MustCompile(`"(` + strings.Join(runtime.Kinds(), "|") + `)"`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := names.Find(data); m != nil {
			t.Errorf("%s names kind %s", f, m)
		}
	}
}
