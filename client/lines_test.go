package client_test

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/mlstream/mlstream/client"
	"github.com/mlstream/mlstream/runtime"
)

// sentBatch is what a batch held when the server answered it.
type sentBatch struct {
	body string
	tags []int64
}

// sendLines sends lines through a Sender of cfg with add, and returns the
// batches as the server answered them (Concurrency 1: in order) and the
// stats.
func sendLines(t *testing.T, c *client.Client, cfg client.SenderConfig, add func(s *client.Sender) error) ([]sentBatch, client.SenderStats) {
	t.Helper()
	var mu sync.Mutex
	var got []sentBatch
	cfg.Concurrency = 1
	cfg.OnResult = func(r client.Result) {
		if r.Err != nil {
			t.Errorf("batch refused: %v", r.Err)
		}
		mu.Lock()
		defer mu.Unlock()
		// Copies: with Recycle, the batch is filled again once this returns.
		got = append(got, sentBatch{string(r.Batch.Body), append([]int64(nil), r.Batch.Tags...)})
	}
	s := c.NewSender(t.Context(), "mail", cfg)
	if err := add(s); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return got, s.Stats()
}

// AddLines makes the batches AddRaw makes of the same lines one at a time:
// the same bodies (blank lines skipped, white space trimmed, Unicode's
// too) and the same tags (every line counted), split at the same events
// and bytes, whether the lines come in one block or several, and with the
// arrays of answered batches recycled.
func TestSenderAddLinesBatchesAsAddRaw(t *testing.T) {
	srv, _ := startServer(t, runtime.Config{}, nil)
	c := newClient(t, srv.http.URL, client.Config{})
	putJob(t, c, 0)
	lines := strings.Split(strings.TrimSpace(string(events(0, 60))), "\n")
	lines[3] = "  " + lines[3] + "\t"
	lines[7] = lines[7] + "\r"
	lines[11] = "\u00a0" + lines[11]
	lines[20], lines[21] = "", "   "
	lines[30] = "\r"
	input := strings.Join(lines, "\n") // the last line without its newline
	for _, cfg := range []client.SenderConfig{{MaxEvents: 7}, {MaxBytes: 150}, {MaxEvents: 500, Recycle: true}, {MaxEvents: 5, Recycle: true}} {
		t.Run(fmt.Sprintf("events %d bytes %d recycle %v", cfg.MaxEvents, cfg.MaxBytes, cfg.Recycle), func(t *testing.T) {
			cfg.FlushAfter = -1
			want, wantStats := sendLines(t, c, cfg, func(s *client.Sender) error {
				for i, l := range lines {
					if err := s.AddRaw([]byte(l), int64(100+i)); err != nil {
						return err
					}
				}
				return nil
			})
			for _, cuts := range [][]int{nil, {1}, {2, 9, 10, 33}} {
				got, stats := sendLines(t, c, cfg, func(s *client.Sender) error {
					return addInBlocks(s, input, cuts, 100)
				})
				if fmt.Sprint(got) != fmt.Sprint(want) || stats != wantStats {
					t.Errorf("blocks cut after lines %v:\n%v\n%+v\nwant\n%v\n%+v", cuts, got, stats, want, wantStats)
				}
			}
		})
	}
}

// addInBlocks adds the lines of input with AddLines, in blocks that end
// after the lines numbered in cuts (0-based), the first line tagged first.
func addInBlocks(s *client.Sender, input string, cuts []int, first int64) error {
	rest, line := []byte(input), 0
	for _, cut := range append(cuts, -1) {
		n := len(rest)
		if cut >= 0 {
			n = 0
			for ; line <= cut; line++ {
				n += bytes.IndexByte(rest[n:], '\n') + 1
			}
		}
		if err := s.AddLines(rest[:n], first); err != nil {
			return err
		}
		first += int64(bytes.Count(rest[:n], []byte("\n")))
		rest = rest[n:]
	}
	return nil
}
