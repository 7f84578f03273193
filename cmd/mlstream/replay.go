package main

// `mlstream replay FILE --stream S` streams an NDJSON file to a running server.
//
// Design decisions (see also the usage text):
//   - The file is read line by line with a bufio.Reader (lines up to 16 MiB; a longer line stops
//     the replay with its line number). Blank lines are skipped. Lines are not parsed: the server
//     is the only judge of an event, and a batch is accepted or rejected whole.
//   - Events are grouped into batches of --batch lines (or fewer when a batch reaches --batch-bytes)
//     and POSTed as application/x-ndjson by --concurrency workers. Batches may therefore arrive
//     out of order across workers; the lines inside a batch keep the file's order.
//   - --rate paces batches with a token-bucket schedule (GCRA): the batch that carries events
//     [c, c+n) leaves no earlier than one batch interval after the one before it, with at most one
//     batch of catch-up credit after a stall, so timer overshoot does not accumulate and a stall is
//     not followed by a burst. With --rate a batch holds at most ceil(rate/10) events, so the
//     stream is smooth at 100 ms granularity instead of arriving in large bursts.
//   - 429: the same batch is retried after retry_after_ms from the JSON body when present, else
//     the Retry-After header (seconds or HTTP date), else exponential backoff. 408, 5xx and network
//     errors (including a per-request --timeout) are retried with exponential backoff with jitter
//     (100 ms doubling, at most 5 s). Both kinds share --max-retries per batch; past it the replay
//     fails. A retried request that had in fact been accepted (e.g. a timeout after the server
//     queued it) is delivered twice: HTTP ingest has no idempotency key yet.
//   - 400 and 413 reject the batch: its events are counted as rejected and the replay goes on.
//     404 (unknown stream) and any other 4xx stop the replay.
//   - Cancelling ctx (Ctrl-C) stops dispatching at once, lets requests already in flight finish
//     for up to 2 s, prints the summary so far and returns an error wrapping ctx.Err().

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// replayStdin is what `mlstream replay -` reads; tests replace it.
var replayStdin io.Reader = os.Stdin

// Tunables, variables so that tests can shrink them.
var (
	replayMaxLineBytes  = 16 << 20               // longest accepted input line
	replayBackoffBase   = 100 * time.Millisecond // first backoff on 5xx/network errors
	replayBackoffMax    = 5 * time.Second        // backoff cap
	replayGrace         = 2 * time.Second        // in-flight requests may finish this long after ctx is cancelled
	replayProgressEvery = 200 * time.Millisecond // progress redraw period
)

const (
	replayMaxShownProblems = 10       // rejected batches / transient errors printed to stderr
	replayMaxResponseBytes = 64 << 10 // read at most this much of a response body
)

type replayOptions struct {
	file        string
	stream      string
	url         string
	rate        float64
	batch       int
	batchBytes  int
	concurrency int
	timeout     time.Duration
	maxRetries  int
	progress    string
}

const replayUsage = `usage: mlstream replay FILE --stream S [--url U] [--rate R] [--batch N] [flags]

Streams an NDJSON file (one JSON event per line, blank lines skipped; FILE "-" reads stdin)
to POST {url}/v1/streams/{stream}/events, showing progress on stderr and a summary on stdout.
FILE may come before or after the flags. With --rate, a batch holds at most ceil(rate/10)
events so that events flow smoothly.

flags:
`

// parseReplayArgs parses the arguments after "replay". It returns flag.ErrHelp for -h/--help.
func parseReplayArgs(args []string, stderr io.Writer) (*replayOptions, error) {
	o := &replayOptions{}
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.stream, "stream", "", "stream to post the events to (required)")
	fs.StringVar(&o.url, "url", "http://localhost:8080", "base URL of the mlstream server")
	fs.Float64Var(&o.rate, "rate", 0, "events per second; 0 sends as fast as the server takes them")
	fs.IntVar(&o.batch, "batch", 500, "events per request")
	fs.IntVar(&o.batchBytes, "batch-bytes", 4<<20, "send a batch early once its body reaches this many bytes")
	fs.IntVar(&o.concurrency, "concurrency", 2, "requests in flight at once")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "timeout of one request (then it is retried)")
	fs.IntVar(&o.maxRetries, "max-retries", 100, "retries of one batch (on 429, 408, 5xx, network errors) before giving up")
	fs.StringVar(&o.progress, "progress", "auto", "progress line on stderr: auto (when stderr is a terminal), on, off")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), replayUsage)
		fs.PrintDefaults()
	}

	// The flag package stops at the first non-flag argument: take it as a positional one and go on
	// parsing, so that FILE may stand before, between or after the flags. After "--" everything
	// is positional.
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", errUsage, err) // the flag package has printed it
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}

	switch {
	case len(positional) == 0:
		return nil, errors.New("replay: missing FILE (use - for stdin); see mlstream replay -h")
	case len(positional) > 1:
		return nil, fmt.Errorf("replay: expected one FILE, got %d: %q", len(positional), positional)
	case o.stream == "":
		return nil, errors.New("replay: --stream is required")
	case o.batch < 1:
		return nil, fmt.Errorf("replay: --batch must be at least 1, got %d", o.batch)
	case o.batchBytes < 1:
		return nil, fmt.Errorf("replay: --batch-bytes must be at least 1, got %d", o.batchBytes)
	case o.concurrency < 1:
		return nil, fmt.Errorf("replay: --concurrency must be at least 1, got %d", o.concurrency)
	case o.rate < 0 || math.IsNaN(o.rate) || math.IsInf(o.rate, 0):
		return nil, fmt.Errorf("replay: --rate must be a finite number >= 0, got %v", o.rate)
	case o.timeout <= 0:
		return nil, fmt.Errorf("replay: --timeout must be positive, got %v", o.timeout)
	case o.maxRetries < 0:
		return nil, fmt.Errorf("replay: --max-retries must be >= 0, got %d", o.maxRetries)
	case o.progress != "auto" && o.progress != "on" && o.progress != "off":
		return nil, fmt.Errorf("replay: --progress must be auto, on or off, got %q", o.progress)
	}
	u, err := url.Parse(o.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("replay: --url must be an http(s) URL like http://localhost:8080, got %q", o.url)
	}
	o.file = positional[0]
	return o, nil
}

// runReplay implements `mlstream replay`. args are the arguments after "replay".
func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseReplayArgs(args, stderr)
	if err != nil {
		return err
	}

	var in io.Reader
	size := int64(-1)
	if o.file == "-" {
		in = replayStdin
	} else {
		f, err := os.Open(o.file)
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			size = fi.Size()
		}
		in = f
	}

	r := newReplayer(o, size, stderr)
	r.run(ctx, in)
	r.printSummary(stdout)
	return r.result(ctx)
}

// replayBatch is a request body and the file line number of each of its events.
type replayBatch struct {
	body  []byte
	lines []int
}

func (b *replayBatch) span() string {
	first, last := b.lines[0], b.lines[len(b.lines)-1]
	if first == last {
		return fmt.Sprintf("line %d", first)
	}
	return fmt.Sprintf("lines %d-%d", first, last)
}

type replayer struct {
	opts     *replayOptions
	endpoint string
	client   *http.Client
	ui       *replayUI
	size     int64 // input size in bytes, -1 when unknown
	start    time.Time
	elapsed  time.Duration

	bytesRead  atomic.Int64
	read       atomic.Int64 // events read from the input into batches
	sent       atomic.Int64 // events with a final answer (accepted or rejected)
	accepted   atomic.Int64
	rejected   atomic.Int64
	retries429 atomic.Int64
	retriesErr atomic.Int64

	runCtx    context.Context // cancelled on ctx cancellation or a fatal error: no new work
	cancelRun context.CancelFunc
	reqCtx    context.Context // parent of requests: cancelled on a fatal error, or replayGrace after ctx
	cancelReq context.CancelFunc

	fatalMu sync.Mutex
	fatal   error
}

func newReplayer(o *replayOptions, size int64, stderr io.Writer) *replayer {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = o.concurrency
	showProgress := o.progress == "on" || (o.progress == "auto" && replayIsTerminal(stderr))
	return &replayer{
		opts:     o,
		endpoint: strings.TrimRight(o.url, "/") + "/v1/streams/" + url.PathEscape(o.stream) + "/events",
		client:   &http.Client{Transport: tr},
		ui:       &replayUI{w: stderr, progress: showProgress},
		size:     size,
	}
}

func replayIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// setFatal records the first fatal error and stops all work, in flight included.
func (r *replayer) setFatal(err error) {
	r.fatalMu.Lock()
	if r.fatal == nil {
		r.fatal = err
	}
	r.fatalMu.Unlock()
	r.cancelRun()
	r.cancelReq()
}

func (r *replayer) fatalErr() error {
	r.fatalMu.Lock()
	defer r.fatalMu.Unlock()
	return r.fatal
}

func (r *replayer) batchLimit() int {
	n := r.opts.batch
	if r.opts.rate > 0 {
		n = min(n, max(1, int(math.Ceil(r.opts.rate/10))))
	}
	return n
}

func (r *replayer) run(ctx context.Context, in io.Reader) {
	r.start = time.Now()
	defer func() { r.elapsed = time.Since(r.start) }()

	r.runCtx, r.cancelRun = context.WithCancel(ctx)
	defer r.cancelRun()
	r.reqCtx, r.cancelReq = context.WithCancel(context.WithoutCancel(ctx))
	defer r.cancelReq()
	stopGrace := context.AfterFunc(ctx, func() { time.AfterFunc(replayGrace, r.cancelReq) })
	defer stopGrace()

	progressDone := make(chan struct{})
	progressStopped := make(chan struct{})
	go r.progressLoop(progressDone, progressStopped)
	defer func() {
		close(progressDone)
		<-progressStopped
	}()

	// The reader runs on its own goroutine so that a cancelled ctx is seen even while a read from
	// stdin blocks; such a goroutine is left behind, blocked in Read, until the process exits.
	batches := make(chan *replayBatch)
	var readErr error
	go func() {
		defer close(batches)
		readErr = r.readBatches(in, batches)
	}()

	work := make(chan *replayBatch)
	var wg sync.WaitGroup
	for range r.opts.concurrency {
		wg.Go(func() {
			for b := range work {
				r.send(b)
			}
		})
	}

	pace := replayPacer{rate: r.opts.rate}
	readAll := false
dispatch:
	for {
		var b *replayBatch
		select {
		case <-r.runCtx.Done():
			break dispatch
		case bb, ok := <-batches:
			if !ok {
				readAll = true
				break dispatch
			}
			b = bb
		}
		if !pace.wait(r.runCtx, len(b.lines)) {
			break dispatch
		}
		select {
		case work <- b:
		case <-r.runCtx.Done():
			break dispatch
		}
	}
	close(work)
	wg.Wait()
	if readAll && readErr != nil {
		r.setFatal(readErr)
	}
}

// readBatches reads the input, groups non-blank lines into batches and sends them on out until
// the input ends (nil), reading fails (an error naming the line) or the run is stopped (nil).
func (r *replayer) readBatches(in io.Reader, out chan<- *replayBatch) error {
	br := bufio.NewReaderSize(in, 64<<10)
	limit := r.batchLimit()
	cur := &replayBatch{}
	flush := func() bool {
		if len(cur.lines) == 0 {
			return true
		}
		r.read.Add(int64(len(cur.lines)))
		select {
		case out <- cur:
			cur = &replayBatch{}
			return true
		case <-r.runCtx.Done():
			return false
		}
	}
	var buf []byte
	lineNo := 0
	for {
		var err error
		lineNo++
		buf, err = readReplayLine(br, buf[:0], &r.bytesRead)
		if errors.Is(err, errReplayLineTooLong) {
			flush()
			return fmt.Errorf("replay: line %d is longer than %d bytes", lineNo, replayMaxLineBytes)
		}
		if err != nil && err != io.EOF {
			flush()
			return fmt.Errorf("replay: reading line %d: %w", lineNo, err)
		}
		if line := bytes.TrimSpace(buf); len(line) > 0 {
			cur.body = append(cur.body, line...)
			cur.body = append(cur.body, '\n')
			cur.lines = append(cur.lines, lineNo)
			if len(cur.lines) >= limit || len(cur.body) >= r.opts.batchBytes {
				if !flush() {
					return nil
				}
			}
		}
		if err == io.EOF {
			flush()
			return nil
		}
	}
}

var errReplayLineTooLong = errors.New("line too long")

// readReplayLine appends the next line (without its trailing newline) to buf. It returns io.EOF
// with the last, unterminated line (possibly empty) at the end of the input.
func readReplayLine(br *bufio.Reader, buf []byte, bytesRead *atomic.Int64) ([]byte, error) {
	for {
		frag, err := br.ReadSlice('\n')
		bytesRead.Add(int64(len(frag)))
		if len(buf)+len(frag) > replayMaxLineBytes+2 { // +2: room for "\r\n"
			return buf, errReplayLineTooLong
		}
		buf = append(buf, frag...)
		if err == bufio.ErrBufferFull {
			continue
		}
		buf = bytes.TrimSuffix(buf, []byte("\n"))
		buf = bytes.TrimSuffix(buf, []byte("\r"))
		if len(buf) > replayMaxLineBytes {
			return buf, errReplayLineTooLong
		}
		return buf, err
	}
}

// replayPacer schedules batches at a rate in events per second (GCRA, burst of one batch).
type replayPacer struct {
	rate float64
	tat  time.Time // theoretical time at which the next batch may leave
}

// wait blocks until a batch of n events may be sent; false if ctx ended first.
func (p *replayPacer) wait(ctx context.Context, n int) bool {
	if p.rate <= 0 {
		return ctx.Err() == nil
	}
	cost := time.Duration(float64(n) / p.rate * float64(time.Second))
	now := time.Now()
	if p.tat.IsZero() {
		p.tat = now // the first batch leaves at once, with no credit
	}
	if floor := now.Add(-cost); p.tat.Before(floor) {
		p.tat = floor
	}
	if d := p.tat.Sub(now); d > 0 && !replaySleep(ctx, d) {
		return false
	}
	p.tat = p.tat.Add(cost)
	return ctx.Err() == nil
}

func replaySleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// replayErrorBody is the server's error answer; retry_after_ms comes with 429.
type replayErrorBody struct {
	Error        string `json:"error"`
	Line         int    `json:"line"`
	Field        string `json:"field"`
	RetryAfterMS *int64 `json:"retry_after_ms"`
}

// send delivers one batch, retrying as the server asks; it returns when the batch has a final
// answer, when the run stops, or after recording a fatal error.
func (r *replayer) send(b *replayBatch) {
	n := int64(len(b.lines))
	retries, backoffs := 0, 0
	retry := func(delay time.Duration, why string, counter *atomic.Int64) bool {
		if retries >= r.opts.maxRetries {
			r.setFatal(fmt.Errorf("replay: giving up on %s after %d retries: %s", b.span(), retries, why))
			return false
		}
		retries++
		counter.Add(1)
		return replaySleep(r.runCtx, delay)
	}
	backoff := func() time.Duration {
		d := min(replayBackoffBase<<min(backoffs, 20), replayBackoffMax)
		backoffs++
		return d/2 + rand.N(d/2+1)
	}

	for r.runCtx.Err() == nil {
		status, header, body, err := r.post(b)
		if err != nil {
			if r.reqCtx.Err() != nil {
				return // stopped: interrupted or fatal error elsewhere
			}
			d := backoff()
			r.ui.problem("%s: %v; retrying in %v", b.span(), err, d.Round(time.Millisecond))
			if !retry(d, err.Error(), &r.retriesErr) {
				return
			}
			continue
		}
		var eb replayErrorBody
		_ = json.Unmarshal(body, &eb) // best effort: bodies of errors may be anything
		switch {
		case status >= 200 && status < 300:
			var ok struct {
				Accepted *int64 `json:"accepted"`
			}
			acc := n
			if json.Unmarshal(body, &ok) == nil && ok.Accepted != nil {
				acc = *ok.Accepted
			}
			r.accepted.Add(acc)
			r.sent.Add(n)
			return
		case status == http.StatusBadRequest:
			r.rejected.Add(n)
			r.sent.Add(n)
			r.ui.problem("rejected %s (%d events): %s", b.span(), n, describeReplayError(b, &eb, body))
			return
		case status == http.StatusRequestEntityTooLarge:
			r.rejected.Add(n)
			r.sent.Add(n)
			r.ui.problem("rejected %s (%d events, %d bytes): request too large for the server (413); lower --batch or --batch-bytes",
				b.span(), n, len(b.body))
			return
		case status == http.StatusNotFound:
			r.setFatal(fmt.Errorf("replay: stream %q not found at %s (404): %s",
				r.opts.stream, r.opts.url, describeReplayError(b, &eb, body)))
			return
		case status == http.StatusTooManyRequests:
			d, hinted := replayRetryAfter(header, &eb, time.Now())
			if !hinted {
				d = backoff()
			}
			if !retry(d, "server busy (429)", &r.retries429) {
				return
			}
		case status == http.StatusRequestTimeout || status >= 500:
			d := backoff()
			why := fmt.Sprintf("%d %s: %s", status, http.StatusText(status), describeReplayError(b, &eb, body))
			r.ui.problem("%s: %s; retrying in %v", b.span(), why, d.Round(time.Millisecond))
			if !retry(d, why, &r.retriesErr) {
				return
			}
		default:
			r.setFatal(fmt.Errorf("replay: server answered %d %s for %s: %s",
				status, http.StatusText(status), b.span(), describeReplayError(b, &eb, body)))
			return
		}
	}
}

// post makes one attempt; a non-nil error is a network error or timeout.
func (r *replayer) post(b *replayBatch) (int, http.Header, []byte, error) {
	ctx, cancel := context.WithTimeout(r.reqCtx, r.opts.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.endpoint, bytes.NewReader(b.body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("User-Agent", "mlstream-replay")
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, replayMaxResponseBytes))
	if err != nil {
		return 0, nil, nil, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // let the connection be reused
	return resp.StatusCode, resp.Header, body, nil
}

// replayRetryAfter returns the delay a 429 asks for: retry_after_ms from the body when present,
// else the Retry-After header (delay in seconds or an HTTP date). hinted is false when neither is.
func replayRetryAfter(h http.Header, eb *replayErrorBody, now time.Time) (d time.Duration, hinted bool) {
	if eb != nil && eb.RetryAfterMS != nil && *eb.RetryAfterMS >= 0 {
		return time.Duration(*eb.RetryAfterMS) * time.Millisecond, true
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// describeReplayError renders a server error, mapping its line (1-based within the batch body)
// to the line number in the input file.
func describeReplayError(b *replayBatch, eb *replayErrorBody, raw []byte) string {
	if eb.Error == "" {
		s := strings.TrimSpace(string(raw))
		if len(s) > 200 {
			s = s[:200] + "..."
		}
		if s == "" {
			s = "(empty response)"
		}
		return s
	}
	var sb strings.Builder
	if eb.Line > 0 {
		fileLine := b.lines[0] + eb.Line - 1
		if eb.Line <= len(b.lines) {
			fileLine = b.lines[eb.Line-1]
		}
		fmt.Fprintf(&sb, "line %d: ", fileLine)
	}
	sb.WriteString(eb.Error)
	if eb.Field != "" {
		fmt.Fprintf(&sb, " (field %q)", eb.Field)
	}
	return sb.String()
}

func (r *replayer) progressLoop(done <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	if !r.ui.progress {
		<-done
		return
	}
	t := time.NewTicker(replayProgressEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			r.ui.draw(r.progressLine())
		case <-done:
			r.ui.draw(r.progressLine())
			r.ui.endProgress()
			return
		}
	}
}

func (r *replayer) progressLine() string {
	secs := time.Since(r.start).Seconds()
	sent := r.sent.Load()
	var sb strings.Builder
	if r.size > 0 {
		fmt.Fprintf(&sb, "%5.1f%%  ", 100*float64(r.bytesRead.Load())/float64(r.size))
	}
	fmt.Fprintf(&sb, "sent %d events  %.0f events/s  rejected %d  retries %d",
		sent, float64(sent)/max(secs, 1e-9), r.rejected.Load(), r.retries429.Load()+r.retriesErr.Load())
	return sb.String()
}

func (r *replayer) printSummary(w io.Writer) {
	read, sent := r.read.Load(), r.sent.Load()
	rows := [][2]string{
		{"events read", strconv.FormatInt(read, 10)},
		{"events sent", strconv.FormatInt(sent, 10)},
		{"accepted", strconv.FormatInt(r.accepted.Load(), 10)},
		{"rejected", strconv.FormatInt(r.rejected.Load(), 10)},
	}
	if read > sent {
		rows = append(rows, [2]string{"not sent", strconv.FormatInt(read-sent, 10)})
	}
	rate := 0.0
	if s := r.elapsed.Seconds(); s > 0 {
		rate = float64(sent) / s
	}
	rows = append(rows,
		[2]string{"retries on 429", strconv.FormatInt(r.retries429.Load(), 10)},
		[2]string{"retries on errors", strconv.FormatInt(r.retriesErr.Load(), 10)},
		[2]string{"elapsed", r.elapsed.Round(time.Millisecond).String()},
		[2]string{"events/s", strconv.FormatFloat(rate, 'f', 0, 64)},
	)
	for _, row := range rows {
		fmt.Fprintf(w, "%-18s %12s\n", row[0], row[1])
	}
}

func (r *replayer) result(ctx context.Context) error {
	if err := r.fatalErr(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("replay interrupted after %d of %d events read: %w", r.sent.Load(), r.read.Load(), err)
	}
	if r.accepted.Load() == 0 && r.rejected.Load() > 0 {
		return fmt.Errorf("replay: all %d events were rejected", r.rejected.Load())
	}
	return nil
}

// replayUI serialises stderr output: a progress line redrawn with \r, and messages that clear it.
type replayUI struct {
	mu         sync.Mutex
	w          io.Writer
	progress   bool
	lastLen    int // length of the progress line on screen, 0 if none
	shown      int // problems printed
	suppressed bool
}

func (u *replayUI) clearLocked() {
	if u.lastLen > 0 {
		fmt.Fprintf(u.w, "\r%s\r", strings.Repeat(" ", u.lastLen))
		u.lastLen = 0
	}
}

// problem prints a rejected batch or transient error, up to replayMaxShownProblems of them.
func (u *replayUI) problem(format string, args ...any) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.shown >= replayMaxShownProblems {
		if !u.suppressed {
			u.suppressed = true
			u.clearLocked()
			fmt.Fprintln(u.w, "replay: further problems are not shown; the summary counts them")
		}
		return
	}
	u.shown++
	u.clearLocked()
	fmt.Fprintf(u.w, "replay: "+format+"\n", args...)
}

func (u *replayUI) draw(line string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	pad := ""
	if n := u.lastLen - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprintf(u.w, "\r%s%s", line, pad)
	u.lastLen = len(line)
}

func (u *replayUI) endProgress() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.lastLen > 0 {
		fmt.Fprintln(u.w)
		u.lastLen = 0
	}
}
