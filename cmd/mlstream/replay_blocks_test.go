package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// Lines read in blocks keep their numbers: blank lines, CRLF, a line
// longer than a block and the blocks' edges do not shift them, and a
// refused event is named by its line in the file.
func TestReplayBlocksKeepLineNumbers(t *testing.T) {
	p := newReplayPeer(t, func(w http.ResponseWriter, i int, keys []int) bool {
		for j, k := range keys {
			if k == 5 {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprintf(w, `{"error":"bad event","line":%d,"field":"label"}`, j+1)
				return true
			}
		}
		return false
	})
	big := `{"key":"3","features":{"pad":"` + strings.Repeat("x", replayBlockBytes+100) + `"}}`
	var lines []string
	lines = append(lines, `{"key":"1"}`, ``, "{\"key\":\"2\"}\r", big, `{"key":"4"}`, `   `, `{"key":"5"}`)
	for k := 6; k <= 5000; k++ { // several blocks more
		lines = append(lines, fmt.Sprintf(`{"key":"%d","features":{"pad":"%s"}}`, k, strings.Repeat("y", k%500)))
	}
	path := replayWriteFile(t, strings.Join(lines, "\n")+"\n")
	out, errOut, err := doReplay(t, t.Context(), path, "--stream", "clicks", "--url", p.srv.URL, "--batch", "2")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "bad line 7, left out: bad event (field \"label\")") {
		t.Errorf("the refused event is not named by its line 7:\n%s", errOut)
	}
	wantReplaySummary(t, out, map[string]string{"events read": "5000", "accepted": "4999", "bad lines": "1", "rejected": "0"})
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := map[int]bool{}
	for _, b := range p.batch {
		for _, k := range b {
			seen[k] = true
		}
	}
	for k := 1; k <= 5000; k++ {
		if seen[k] == (k == 5) {
			t.Fatalf("event %d accepted: %v", k, seen[k])
		}
	}
}
