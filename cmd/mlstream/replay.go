package main

// `mlstream replay FILE --stream S` streams an NDJSON file to a running server.
//
// Design decisions (see also the usage text):
//   - The file is read line by line with a bufio.Reader (lines up to 16 MiB; a longer line stops
//     the replay with its line number). Blank lines are skipped. Lines are not parsed: the server
//     is the only judge of an event, and a batch is accepted or rejected whole.
//   - Everything HTTP is package client: a client.Sender groups the events into batches of --batch
//     lines (or fewer when a batch reaches --batch-bytes, or --flush-after passed since its first
//     line), paces them to --rate (at most ceil(rate/10) events a batch, GCRA) and POSTs them as
//     application/x-ndjson with --concurrency requests in flight. Batches may arrive out of order
//     across requests; the lines inside a batch keep the file's order.
//   - 429: the same batch is retried after retry_after_ms from the JSON body when present, else
//     the Retry-After header, else exponential backoff. 408, 5xx and network errors (including a
//     per-request --timeout) are retried with exponential backoff with jitter (100 ms doubling, at
//     most 5 s). Both kinds share --max-retries per batch, and retrying stops once no request has
//     succeeded for --give-up (a dead or stuck server); either way the replay fails. A retried
//     request that had in fact been accepted (e.g. a timeout after the server queued it) is
//     delivered twice: HTTP ingest has no idempotency key yet.
//   - A 400 naming a line refuses that one event: it is counted as a bad line, written to
//     --bad-lines FILE when given (and shown on stderr), and the rest of the batch is sent again
//     without it (client.SenderConfig.OnBadEvent: at most one request more per bad line). A 400
//     naming no line, and a 413, reject the whole batch: its events are counted as rejected.
//     Either way the replay goes on. 404 (unknown stream) and any other 4xx stop the replay.
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
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlstream/mlstream/client"
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

const replayMaxShownProblems = 10 // rejected batches / transient errors printed to stderr

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
	giveUp      time.Duration
	flushAfter  time.Duration
	token       string
	progress    string
	badLines    string
}

const replayUsage = `usage: mlstream replay FILE --stream S [--url U] [--rate R] [--batch N] [flags]

Streams an NDJSON file (one JSON event per line, blank lines skipped; FILE "-" reads stdin)
to POST {url}/v1/streams/{stream}/events, showing progress on stderr and a summary on stdout.
FILE may come before or after the flags. An event the server refuses (400 naming its line) is
left out and the rest of its batch sent again; --bad-lines FILE keeps such events, one JSON
object a line: {"line": N, "error": "...", "field": "...", "event": "<the line as text>"}.
With --rate, a batch holds at most ceil(rate/10)
events so that events flow smoothly. The bearer token is --token, else $MLSTREAM_TOKEN.

flags:
`

// parseReplayArgs parses the arguments after "replay". It returns flag.ErrHelp for -h/--help.
func parseReplayArgs(args []string, stderr io.Writer) (*replayOptions, error) {
	o := &replayOptions{}
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.register(fs)
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, err
	}
	if err := o.check(positional); err != nil {
		return nil, err
	}
	o.file = positional[0]
	if o.token == "" {
		o.token = os.Getenv("MLSTREAM_TOKEN")
	}
	return o, nil
}

// register defines replay's flags and usage on fs.
func (o *replayOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.stream, "stream", "", "stream to post the events to (required)")
	fs.StringVar(&o.url, "url", "http://localhost:8080", "base URL of the mlstream server")
	fs.Float64Var(&o.rate, "rate", 0, "events per second; 0 sends as fast as the server takes them")
	fs.IntVar(&o.batch, "batch", 500, "events per request")
	fs.IntVar(&o.batchBytes, "batch-bytes", 4<<20, "send a batch early once its body reaches this many bytes")
	fs.IntVar(&o.concurrency, "concurrency", 2, "requests in flight at once")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "timeout of one request (then it is retried)")
	fs.IntVar(&o.maxRetries, "max-retries", 100, "retries of one batch (on 429, 408, 5xx, network errors) before giving up")
	fs.DurationVar(&o.giveUp, "give-up", 30*time.Second, "stop retrying, and fail, once no request has succeeded for this long (0: never)")
	fs.DurationVar(&o.flushAfter, "flush-after", 100*time.Millisecond, "send a batch that is not full this long after its first line (for slow input such as a pipe)")
	fs.StringVar(&o.token, "token", "", "bearer token sent as Authorization (default $MLSTREAM_TOKEN)")
	fs.StringVar(&o.progress, "progress", "auto", "progress line on stderr: auto (when stderr is a terminal), on, off")
	fs.StringVar(&o.badLines, "bad-lines", "", "write the events the server refuses, with their line numbers, to this file (NDJSON; created or truncated)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), replayUsage)
		fs.PrintDefaults()
	}
}

// parseInterspersed parses flags and positional arguments in any order.
// The flag package stops at the first non-flag argument: take it as a
// positional one and go on parsing, so that FILE may stand before, between
// or after the flags. After "--" everything is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
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
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// check refuses a missing or second FILE and flag values out of range.
func (o *replayOptions) check(positional []string) error {
	switch {
	case len(positional) == 0:
		return errors.New("replay: missing FILE (use - for stdin); see mlstream replay -h")
	case len(positional) > 1:
		return fmt.Errorf("replay: expected one FILE, got %d: %q", len(positional), positional)
	case o.stream == "":
		return errors.New("replay: --stream is required")
	case o.batch < 1:
		return fmt.Errorf("replay: --batch must be at least 1, got %d", o.batch)
	case o.batchBytes < 1:
		return fmt.Errorf("replay: --batch-bytes must be at least 1, got %d", o.batchBytes)
	case o.concurrency < 1:
		return fmt.Errorf("replay: --concurrency must be at least 1, got %d", o.concurrency)
	case o.rate < 0 || math.IsNaN(o.rate) || math.IsInf(o.rate, 0):
		return fmt.Errorf("replay: --rate must be a finite number >= 0, got %v", o.rate)
	case o.timeout <= 0:
		return fmt.Errorf("replay: --timeout must be positive, got %v", o.timeout)
	case o.maxRetries < 0:
		return fmt.Errorf("replay: --max-retries must be >= 0, got %d", o.maxRetries)
	case o.giveUp < 0:
		return fmt.Errorf("replay: --give-up must be >= 0, got %v", o.giveUp)
	case o.flushAfter <= 0:
		return fmt.Errorf("replay: --flush-after must be positive, got %v", o.flushAfter)
	case o.progress != "auto" && o.progress != "on" && o.progress != "off":
		return fmt.Errorf("replay: --progress must be auto, on or off, got %q", o.progress)
	}
	u, err := url.Parse(o.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("replay: --url must be an http(s) URL like http://localhost:8080, got %q", o.url)
	}
	return nil
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

	r, err := newReplayer(o, size, stderr)
	if err != nil {
		return err
	}
	if o.badLines != "" {
		f, err := os.Create(o.badLines)
		if err != nil {
			return fmt.Errorf("replay: --bad-lines: %w", err)
		}
		r.bad.w = bufio.NewWriter(f)
		defer f.Close()
	}
	err = r.run(ctx, in)
	if werr := r.bad.close(); werr != nil && err == nil {
		err = fmt.Errorf("writing --bad-lines %s: %w", o.badLines, werr)
	}
	r.printSummary(stdout)
	return r.result(ctx, err)
}

// badLines writes the events the server refused one by one (the dead
// letters of a replay) and counts them.
type badLines struct {
	mu  sync.Mutex
	w   *bufio.Writer // nil: counted and shown only
	n   atomic.Int64
	err error
}

// add records one refused event.
func (b *badLines) add(ev client.BadEvent) {
	b.n.Add(1)
	if b.w == nil {
		return
	}
	rec, err := json.Marshal(struct {
		Line  int64  `json:"line"`
		Error string `json:"error"`
		Field string `json:"field,omitempty"`
		Event string `json:"event"`
	}{ev.Tag, ev.Err.Message, ev.Err.Field, string(ev.Event)})
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil && err == nil {
		_, b.err = b.w.Write(append(rec, '\n'))
	}
}

// close flushes the file, once no event can come.
func (b *badLines) close() error {
	if b.w == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = b.w.Flush()
	}
	return b.err
}

type replayer struct {
	opts    *replayOptions
	client  *client.Client
	sender  *client.Sender
	ui      *replayUI
	size    int64 // input size in bytes, -1 when unknown
	start   time.Time
	elapsed time.Duration

	bytesRead atomic.Int64
	bytesDone atomic.Int64 // body bytes of the batches with a final answer
	bad       badLines
}

func newReplayer(o *replayOptions, size int64, stderr io.Writer) (*replayer, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = o.concurrency
	retry := client.RetryPolicy{MaxRetries: o.maxRetries, GiveUpAfter: o.giveUp, Backoff: replayBackoffBase, MaxBackoff: replayBackoffMax}
	if o.maxRetries == 0 {
		retry.MaxRetries = -1 // none; the client's zero means its default
	}
	if o.giveUp == 0 {
		retry.GiveUpAfter = -1 // never
	}
	c, err := client.New(o.url, client.Config{
		HTTPClient: &http.Client{Transport: tr}, Token: o.token, UserAgent: "mlstream-replay",
		RequestTimeout: o.timeout, Retry: retry,
	})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	showProgress := o.progress == "on" || (o.progress == "auto" && replayIsTerminal(stderr))
	return &replayer{opts: o, client: c, ui: &replayUI{w: stderr, progress: showProgress}, size: size}, nil
}

func replayIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// run sends the input until it ends, ctx ends or sending fails. It returns the error that
// stopped it: a read error, the Sender's, or ctx's.
func (r *replayer) run(ctx context.Context, in io.Reader) error {
	r.start = time.Now()
	defer func() { r.elapsed = time.Since(r.start) }()
	o := r.opts
	r.sender = r.client.NewSender(ctx, o.stream, client.SenderConfig{
		MaxEvents: o.batch, MaxBytes: o.batchBytes, Concurrency: o.concurrency, Rate: o.rate,
		FlushAfter: o.flushAfter, Grace: replayGrace, OnResult: r.onResult, OnRetry: r.onRetry, OnBadEvent: r.onBadEvent,
		Recycle: true, // onResult and onRetry keep no batch
	})

	progressDone := make(chan struct{})
	progressStopped := make(chan struct{})
	go r.progressLoop(progressDone, progressStopped)
	defer func() {
		close(progressDone)
		<-progressStopped
	}()

	// The reader runs on its own goroutine so that a cancelled ctx is seen even while a read from
	// stdin blocks; such a goroutine is left behind, blocked in Read, until the process exits.
	readDone := make(chan error, 1)
	go func() { readDone <- r.readLines(in) }()
	var readErr error
	select {
	case readErr = <-readDone:
	case <-ctx.Done():
	}
	sendErr := r.sender.Close()
	if readErr != nil && sendErr == nil {
		return readErr
	}
	return sendErr
}

// readLines adds the input's lines to the Sender, tagged with their line numbers, until the
// input ends (nil), reading fails (an error naming the line) or the Sender stops (nil: Close
// says why). The lines go in blocks: all the whole lines buffered at a time, in one AddLines.
func (r *replayer) readLines(in io.Reader) error {
	br := bufio.NewReaderSize(in, replayBlockBytes)
	var buf []byte
	for lineNo := int64(1); ; {
		block, err := nextReplayBlock(br)
		if len(block) > 0 {
			n, long := replayBlockLines(block, lineNo)
			if r.sender.AddLines(block[:n], lineNo) != nil {
				return nil
			}
			r.bytesRead.Add(int64(n))
			if long > 0 {
				return fmt.Errorf("line %d is longer than %d bytes", long, replayMaxLineBytes)
			}
			lineNo += int64(bytes.Count(block, []byte{'\n'}))
			br.Discard(len(block))
			continue
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("reading line %d: %w", lineNo, err)
		}
		if err == io.EOF && br.Buffered() == 0 {
			return nil
		}
		// A line that does not end in the buffer: read on to its end.
		buf, err = readReplayLine(br, buf[:0], &r.bytesRead)
		if errors.Is(err, errReplayLineTooLong) {
			return fmt.Errorf("line %d is longer than %d bytes", lineNo, replayMaxLineBytes)
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("reading line %d: %w", lineNo, err)
		}
		if r.sender.AddRaw(buf, lineNo) != nil || err == io.EOF {
			return nil
		}
		lineNo++
	}
}

// replayBlockBytes is the size of the read buffer, and the most a block of lines holds.
const replayBlockBytes = 1 << 20

// nextReplayBlock returns the whole lines buffered in br, reading if none are: nil when the
// next line does not end in the buffer (or at the end of the input, with io.EOF). The block
// stays in br until discarded.
func nextReplayBlock(br *bufio.Reader) ([]byte, error) {
	_, err := br.Peek(1) // fills the buffer when it is empty
	data, _ := br.Peek(br.Buffered())
	end := bytes.LastIndexByte(data, '\n')
	if end < 0 {
		return nil, err
	}
	return data[:end+1], nil
}

// replayBlockLines returns how much of block, from its start, holds lines within
// replayMaxLineBytes (all of it, normally), and the number of the first line that is longer
// (0: none). The first line of block is line first.
func replayBlockLines(block []byte, first int64) (n int, long int64) {
	if len(block) <= replayMaxLineBytes {
		return len(block), 0 // no line in it can be longer
	}
	for line := first; n < len(block); line++ {
		end := n + bytes.IndexByte(block[n:], '\n') // every line of a block ends in it
		l := bytes.TrimSuffix(block[n:end], []byte{'\r'})
		if len(l) > replayMaxLineBytes {
			return n, line
		}
		n = end + 1
	}
	return n, 0
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

// replaySpan names the input lines of a batch.
func replaySpan(b *client.Batch) string {
	first, last := b.Tags[0], b.Tags[len(b.Tags)-1]
	if first == last {
		return fmt.Sprintf("line %d", first)
	}
	return fmt.Sprintf("lines %d-%d", first, last)
}

// onResult reports a batch rejected by the server; the Sender counts it.
func (r *replayer) onResult(res client.Result) {
	r.bytesDone.Add(int64(len(res.Batch.Body)))
	b, e := res.Batch, res.Err
	switch {
	case e == nil:
	case e.Status == http.StatusRequestEntityTooLarge:
		r.ui.problem("rejected %s (%d events, %d bytes): request too large for the server (413); lower --batch or --batch-bytes",
			replaySpan(b), b.Len(), len(b.Body))
	default:
		r.ui.problem("rejected %s (%d events): %s", replaySpan(b), b.Len(), describeReplayError(b, e))
	}
}

// onBadEvent keeps an event the server refused on its own.
func (r *replayer) onBadEvent(ev client.BadEvent) {
	r.bytesDone.Add(int64(len(ev.Event) + 1))
	r.bad.add(ev)
	msg := ev.Err.Message
	if ev.Err.Field != "" {
		msg += fmt.Sprintf(" (field %q)", ev.Err.Field)
	}
	r.ui.problem("bad line %d, left out: %s", ev.Tag, msg)
}

// onRetry reports a transient error; 429s are only counted.
func (r *replayer) onRetry(b *client.Batch, rt client.Retry) {
	var e *client.Error
	if errors.As(rt.Err, &e) && e.Status == http.StatusTooManyRequests {
		return
	}
	r.ui.problem("%s: %s; retrying in %v", replaySpan(b), describeReplayErr(b, rt.Err), rt.Wait.Round(time.Millisecond))
}

// describeReplayErr renders an error of a batch: a server error with its line mapped to the
// input, anything else as it is.
func describeReplayErr(b *client.Batch, err error) string {
	var e *client.Error
	if errors.As(err, &e) {
		return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), describeReplayError(b, e))
	}
	return err.Error()
}

// describeReplayError renders a server error, mapping its line (1-based within the batch body)
// to the line number in the input file.
func describeReplayError(b *client.Batch, e *client.Error) string {
	var sb strings.Builder
	if e.Line > 0 {
		fileLine := b.Tags[0] + int64(e.Line) - 1
		if e.Line <= len(b.Tags) {
			fileLine = b.Tags[e.Line-1]
		}
		fmt.Fprintf(&sb, "line %d: ", fileLine)
	}
	sb.WriteString(e.Message)
	if e.Field != "" {
		fmt.Fprintf(&sb, " (field %q)", e.Field)
	}
	return sb.String()
}

// fatalError words the error that stopped the Sender for the user; it wraps that error.
func (r *replayer) fatalError(err error) error {
	var se *client.SendError
	if !errors.As(err, &se) {
		return &replayError{"replay: " + err.Error(), err}
	}
	span := replaySpan(se.Batch)
	var gu *client.GiveUpError
	var e *client.Error
	var msg string
	switch {
	case errors.As(err, &gu) && gu.MaxRetries:
		msg = fmt.Sprintf("giving up on %s after %d retries: %s", span, gu.Retries, describeReplayErr(se.Batch, gu.Err))
	case errors.As(err, &gu):
		msg = fmt.Sprintf("giving up on %s: no request succeeded for %v (--give-up %v; %d retries); last error: %s",
			span, gu.Quiet.Round(time.Millisecond), r.opts.giveUp, gu.Retries, describeReplayErr(se.Batch, gu.Err))
	case errors.As(err, &e) && e.Status == http.StatusNotFound:
		msg = fmt.Sprintf("stream %q not found at %s (404): %s", r.opts.stream, r.opts.url, describeReplayError(se.Batch, e))
	case errors.As(err, &e):
		msg = fmt.Sprintf("server answered %s for %s", describeReplayErr(se.Batch, e), span)
	default:
		msg = fmt.Sprintf("%s: %v", span, se.Err)
	}
	return &replayError{"replay: " + msg, err}
}

// replayError is a message for the user that wraps the error it words.
type replayError struct {
	msg string
	err error
}

func (e *replayError) Error() string { return e.msg }
func (e *replayError) Unwrap() error { return e.err }

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
	elapsed := time.Since(r.start)
	st := r.sender.Stats()
	var sb strings.Builder
	if r.size > 0 {
		fmt.Fprintf(&sb, "%5.1f%%  ", 100*float64(r.bytesRead.Load())/float64(r.size))
	}
	fmt.Fprintf(&sb, "sent %d events  %.0f events/s", st.Sent, float64(st.Sent)/max(elapsed.Seconds(), 1e-9))
	if eta, ok := r.eta(elapsed); ok {
		fmt.Fprintf(&sb, "  ETA %v", eta)
	}
	fmt.Fprintf(&sb, "  bad lines %d  rejected %d  retries %d", r.bad.n.Load(), st.Refused-r.bad.n.Load(), st.Retries429+st.RetriesErr)
	return sb.String()
}

// eta extrapolates the time left from the share of the input answered so far; it needs the
// input's size.
func (r *replayer) eta(elapsed time.Duration) (time.Duration, bool) {
	done := r.bytesDone.Load()
	if r.size <= 0 || done <= 0 {
		return 0, false
	}
	left := max(r.size-done, 0)
	return (time.Duration(float64(elapsed) * float64(left) / float64(done))).Round(time.Second), true
}

func (r *replayer) printSummary(w io.Writer) {
	st := r.sender.Stats()
	read, sent := st.Added, st.Sent
	bad := r.bad.n.Load()
	rows := [][2]string{
		{"events read", strconv.FormatInt(read, 10)},
		{"events sent", strconv.FormatInt(sent, 10)},
		{"accepted", strconv.FormatInt(st.Accepted, 10)},
		{"bad lines", strconv.FormatInt(bad, 10)},
		{"rejected", strconv.FormatInt(st.Refused-bad, 10)},
	}
	if r.bad.w != nil {
		rows = append(rows, [2]string{"bad lines file", r.opts.badLines})
	}
	if read > sent {
		rows = append(rows, [2]string{"not sent", strconv.FormatInt(read-sent, 10)})
	}
	rate := 0.0
	if s := r.elapsed.Seconds(); s > 0 {
		rate = float64(sent) / s
	}
	rows = append(rows,
		[2]string{"retries on 429", strconv.FormatInt(st.Retries429, 10)},
		[2]string{"retries on errors", strconv.FormatInt(st.RetriesErr, 10)},
		[2]string{"elapsed", r.elapsed.Round(time.Millisecond).String()},
		[2]string{"events/s", strconv.FormatFloat(rate, 'f', 0, 64)},
	)
	for _, row := range rows {
		fmt.Fprintf(w, "%-18s %12s\n", row[0], row[1])
	}
}

// result is the replay's outcome from the error that stopped run.
func (r *replayer) result(ctx context.Context, err error) error {
	st := r.sender.Stats()
	switch {
	case ctx.Err() != nil && (err == nil || errors.Is(err, ctx.Err())):
		return fmt.Errorf("replay interrupted after %d of %d events read: %w", st.Sent, st.Added, ctx.Err())
	case err != nil:
		return r.fatalError(err)
	case st.Accepted == 0 && st.Refused > 0:
		return fmt.Errorf("replay: all %d events were rejected", st.Refused)
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
