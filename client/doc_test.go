package client_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The package doc says how to depend on the module, by its path as
// go.mod names it, and the one dependency it claims is the only one.
func TestPackageDocSaysHowToDepend(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(mod), "\n")
	module := strings.TrimSpace(strings.TrimPrefix(first, "module"))
	src, err := os.ReadFile("client.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"//	go get " + module + "/client\n", `import "` + module + `/client"`, "replace " + module + " => "} {
		if !strings.Contains(string(src), want) {
			t.Errorf("the package doc lacks %q", want)
		}
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		if d != module+"/client" && d != "github.com/gorilla/websocket" {
			t.Errorf("the client depends on %s, which its doc does not say", d)
		}
	}
}
