package main

// `mlstream model export|import|inspect`: a job's model to and from a file
// (GET /v1/jobs/{job}/model/export, PUT /v1/jobs/{job}/model), and what a
// file holds, read offline.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/mlstream/mlstream/kinds/logreg"
	"github.com/mlstream/mlstream/learners"
)

const modelUsage = `usage:
  mlstream model export  --job J [--url U] [--token T] [--format binary|json] [-o FILE]
  mlstream model import  --job J [--url U] [--token T] FILE
  mlstream model inspect [--top N] FILE

export writes the job's model (binary by default, json for a readable form) to FILE or
stdout; import seeds the job with an exported model (admin token); inspect prints a binary
file's header, metrics and strongest weights. FILE "-" is stdin or stdout. The bearer token is
--token, else $MLSTREAM_TOKEN.
`

// modelStdin and modelStdout are what FILE "-" means; tests replace them.
var (
	modelStdin  io.Reader = os.Stdin
	modelStdout io.Writer = os.Stdout
)

// modelServer is where export and import go.
type modelServer struct {
	url, token, job string
}

func runModel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, modelUsage)
		return errUsage
	}
	fs := flag.NewFlagSet("model "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, modelUsage); fs.PrintDefaults() }
	var srv modelServer
	if args[0] != "inspect" {
		fs.StringVar(&srv.url, "url", "http://localhost:8080", "base URL of the mlstream server")
		fs.StringVar(&srv.token, "token", "", "bearer token sent as Authorization (default $MLSTREAM_TOKEN)")
		fs.StringVar(&srv.job, "job", "", "the job (required)")
	}
	format := fs.String("format", "binary", "export: binary or json")
	out := fs.String("o", "-", "export: the file to write")
	top := fs.Int("top", 20, "inspect: how many of the strongest weights to print")
	files, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if srv.token == "" {
		srv.token = os.Getenv("MLSTREAM_TOKEN")
	}
	switch {
	case args[0] == "export" && len(files) == 0 && srv.job != "":
		return srv.export(ctx, *format, *out)
	case args[0] == "import" && len(files) == 1 && srv.job != "":
		return srv.load(ctx, files[0], stdout)
	case args[0] == "inspect" && len(files) == 1:
		return inspectModel(files[0], *top, stdout)
	}
	fmt.Fprint(stderr, modelUsage)
	return errUsage
}

// request sends one request and returns the body of a 200, or an error
// carrying the server's.
func (s modelServer) request(ctx context.Context, method, path, ctype string, body io.Reader) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(s.url, "/")+"/v1/jobs/"+url.PathEscape(s.job)+path, body)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s: %s", method, req.URL.Path, resp.Status, bytes.TrimSpace(data))
	}
	return data, nil
}

func (s modelServer) export(ctx context.Context, format, out string) error {
	data, err := s.request(ctx, "GET", "/model/export?format="+url.QueryEscape(format), "", nil)
	if err != nil {
		return err
	}
	if out == "-" {
		_, err = modelStdout.Write(data)
		return err
	}
	return os.WriteFile(out, data, 0o644)
}

func (s modelServer) load(ctx context.Context, file string, stdout io.Writer) error {
	data, err := readModelFile(file)
	if err != nil {
		return err
	}
	if _, err := s.request(ctx, "PUT", "/model", "application/octet-stream", bytes.NewReader(data)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "imported %s (%d bytes) into job %s\n", file, len(data), s.job)
	return nil
}

func readModelFile(file string) ([]byte, error) {
	if file == "-" {
		return io.ReadAll(modelStdin)
	}
	return os.ReadFile(file)
}

// measuresLine is one line of a model's progressive measures, all but
// the calibration table.
func measuresLine(m learners.Measures) string {
	return fmt.Sprintf("count %d  positives %d  accuracy %.4f  log loss %.4f  AUC %.4f  precision %.4f  recall %.4f  F1 %.4f  (TP %d FP %d FN %d TN %d)",
		m.Count, m.Positives, m.Accuracy, m.LogLoss, m.AUC, m.Precision, m.Recall, m.F1, m.TP, m.FP, m.FN, m.TN)
}

// printCalibration prints the calibration tables of all and recent side
// by side: per bin of predicted probability, its events, mean prediction
// and observed rate of positives.
func printCalibration(w io.Writer, all, recent learners.Measures) error {
	fmt.Fprintln(w, "calibration:")
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "p in\tevents (all)\tmean p\tobserved\tevents (recent)\tmean p\tobserved\t\n")
	for i, a := range all.Calibration {
		r := recent.Calibration[i]
		closing := ")"
		if i == len(all.Calibration)-1 {
			closing = "]"
		}
		fmt.Fprintf(tw, "[%.1f, %.1f%s\t%d\t%.3f\t%.3f\t%d\t%.3f\t%.3f\t\n", a.Lo, a.Hi, closing,
			a.Count, a.MeanPredicted, a.ObservedRate, r.Count, r.MeanPredicted, r.ObservedRate)
	}
	return tw.Flush()
}

// inspectModel prints a binary export's header, metrics and top weights.
func inspectModel(file string, top int, stdout io.Writer) error {
	data, err := readModelFile(file)
	if err != nil {
		return err
	}
	e, err := logreg.DecodeModel(data)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	s, err := e.Summary(top)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	h := e.Header
	params, _ := json.Marshal(h.Params)
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "format\tmlstream model, version %d (%d bytes, checksum ok)\n", logreg.FormatVersion, len(data))
	fmt.Fprintf(tw, "kind\t%s\njob\t%s\nexported at\t%s\n", h.Kind, h.Job, h.ExportedAt.Format("2006-01-02T15:04:05Z07:00"))
	fmt.Fprintf(tw, "params\t%s\n", params)
	fmt.Fprintf(tw, "version\t%d\nupdates\t%d\nslots\t%d (%d non-zero weights)\n", s.Version, s.Updates, s.Slots, s.NonZero)
	fmt.Fprintf(tw, "metrics (all)\t%s\nmetrics (recent)\t%s\n", measuresLine(h.Metrics.All), measuresLine(h.Metrics.Recent))
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := printCalibration(stdout, h.Metrics.All, h.Metrics.Recent); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "top %d weights:\n", len(s.Top))
	tw = tabwriter.NewWriter(stdout, 0, 8, 2, ' ', tabwriter.AlignRight)
	names, err := e.SlotNames()
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	fmt.Fprintf(tw, "slot\tweight\t  names seen (sampled count)\n")
	for _, w := range s.Top {
		var seen []string
		for _, nc := range names[w.Slot] {
			seen = append(seen, fmt.Sprintf("%s (%d)", nc.Name, nc.Count))
		}
		if w.Slot == 1<<h.Params.HashBits {
			seen = []string{"(intercept)"}
		}
		fmt.Fprintf(tw, "%d\t%+.6g\t  %s\n", w.Slot, w.Weight, strings.Join(seen, ", "))
	}
	return tw.Flush()
}
