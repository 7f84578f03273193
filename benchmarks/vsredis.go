package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Section redis-http: mlstream over HTTP against the best Redis does on
// the same items. Redis is fed by its own `redis-cli --pipe` (raw RESP
// from a file, no client library in the way); mlstream, the real binary,
// by `mlstream replay` and by the client package. Both sides are timed as
// wall time and as the CPU time of every process involved, in one run.

// pipeRun is one timed feed: wall seconds, CPU seconds of all processes
// involved, and items.
type pipeRun struct {
	wall, cpu float64
	items     int
}

func (r pipeRun) rate() float64    { return float64(r.items) / r.wall }
func (r pipeRun) cpuRate() float64 { return float64(r.items) / r.cpu }

// medianPipe is the run of median wall rate among reps.
func medianPipe(reps int, f func() pipeRun) pipeRun {
	runs := make([]pipeRun, reps)
	for i := range runs {
		runs[i] = f()
	}
	slices.SortFunc(runs, func(a, b pipeRun) int { return cmp.Compare(a.wall, b.wall) })
	return runs[reps/2]
}

// procCPU is the CPU time of process pid so far, in seconds: the sum over
// its threads of the nanoseconds they ran (/proc/pid/task/*/schedstat),
// finer than the 10 ms ticks of /proc/pid/stat's utime and stime. (A
// thread that exits takes its time with it; neither server's threads
// exit while it serves.)
func procCPU(pid int) float64 {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		panic(fmt.Sprintf("no threads of process %d in /proc: %v", pid, err))
	}
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited after the glob
		}
		f := strings.Fields(string(b))
		v, _ := strconv.ParseInt(f[0], 10, 64)
		ns += v
	}
	return float64(ns) / 1e9
}

// selfCPU is this process's CPU time so far, in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return rusageSecs(&ru)
}

func rusageSecs(ru *syscall.Rusage) float64 {
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// respCommands writes commands as RESP arrays of bulk strings (what
// redis-cli --pipe sends as is).
func respCommands(path string, cmds func(emit func(args ...string))) {
	var b bytes.Buffer
	cmds(func(args ...string) {
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	})
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		panic(err)
	}
}

var pipeSummaryRE = regexp.MustCompile(`errors: (\d+), replies: (\d+)`)

// redisPipe feeds file to redis-server through `redis-cli --pipe` after
// deleting key, and times it: wall time of redis-cli, CPU of redis-cli
// (its rusage) plus that of redis-server (/proc) over the run.
func redisPipe(rdb *redis.Client, port string, serverPid int, key, file string, cmds, items int) pipeRun {
	if err := rdb.Del(context.Background(), key).Err(); err != nil {
		panic(err)
	}
	in, err := os.Open(file)
	if err != nil {
		panic(err)
	}
	defer in.Close()
	var out bytes.Buffer
	cmd := exec.Command("redis-cli", "-p", port, "--pipe")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, &out, &out
	cpu0 := procCPU(serverPid)
	start := time.Now()
	if err := cmd.Run(); err != nil {
		panic(fmt.Sprintf("redis-cli --pipe: %v: %s", err, out.String()))
	}
	wall := time.Since(start).Seconds()
	srv := procCPU(serverPid) - cpu0
	m := pipeSummaryRE.FindStringSubmatch(out.String())
	if m == nil || m[1] != "0" || m[2] != strconv.Itoa(cmds) {
		panic(fmt.Sprintf("redis-cli --pipe: want %d replies and no errors: %s", cmds, out.String()))
	}
	return pipeRun{wall, srv + rusageSecs(cmd.ProcessState.SysUsage().(*syscall.Rusage)), items}
}

// mlstreamServer is the real binary serving jobs declared by cfg (JSON),
// without fault tolerance (Redis runs without persistence too).
type mlstreamServer struct {
	cmd  *exec.Cmd
	url  string
	jobs []string
	fed  uint64 // items sent to each job so far
}

func startMlstream(bin, dir, cfg string, jobs ...string) (*mlstreamServer, error) {
	cfgFile := filepath.Join(dir, "jobs.json")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	cmd, url, _, err := startServer(bin, cfgFile, "")
	if err != nil {
		return nil, err
	}
	return &mlstreamServer{cmd: cmd, url: url, jobs: jobs}, nil
}

func (s *mlstreamServer) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	s.cmd.Wait()
}

// waitProcessed polls every job until it has processed all that was fed
// (the point at which Redis's last reply has arrived, for Redis). It fails
// on a job that processed more or that gives up for a minute.
func (s *mlstreamServer) waitProcessed() {
	c := clientFor(s.url)
	for _, name := range s.jobs {
		deadline := time.Now().Add(time.Minute)
		for {
			st, err := c.Job(context.Background(), name)
			if err != nil {
				panic(err)
			}
			if st.Processed == s.fed {
				break
			}
			if st.Processed > s.fed || time.Now().After(deadline) {
				panic(fmt.Sprintf("job %s processed %d of %d items", name, st.Processed, s.fed))
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// feedReplay runs `mlstream replay file` against s and times it until
// every job has processed the items: CPU of the replay process (rusage)
// and of the server (/proc).
func (s *mlstreamServer) feedReplay(bin, file string, items, batch int) pipeRun {
	var out bytes.Buffer
	cmd := exec.Command(bin, "replay", file, "--stream", "s", "--url", s.url, "--batch", strconv.Itoa(batch), "--progress", "off")
	cmd.Stdout, cmd.Stderr = &out, &out
	cpu0 := procCPU(s.cmd.Process.Pid)
	start := time.Now()
	if err := cmd.Run(); err != nil {
		panic(fmt.Sprintf("mlstream replay: %v: %s", err, out.String()))
	}
	s.fed += uint64(items)
	s.waitProcessed()
	wall := time.Since(start).Seconds()
	return pipeRun{wall, procCPU(s.cmd.Process.Pid) - cpu0 + rusageSecs(cmd.ProcessState.SysUsage().(*syscall.Rusage)), items}
}

// feedClient posts the bodies with the client package from conc
// goroutines and times it until every job has processed the items: CPU
// of this process (which does nothing else meanwhile) and of the server.
func (s *mlstreamServer) feedClient(bodies [][]byte, items, conc int) pipeRun {
	c := clientFor(s.url)
	cpu0, self0 := procCPU(s.cmd.Process.Pid), selfCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for g := range conc {
		wg.Go(func() {
			for i := g; i < len(bodies); i += conc {
				if _, err := c.PostEvents(context.Background(), "s", bodies[i]); err != nil {
					panic(err)
				}
			}
		})
	}
	wg.Wait()
	s.fed += uint64(items)
	s.waitProcessed()
	wall := time.Since(start).Seconds()
	return pipeRun{wall, procCPU(s.cmd.Process.Pid) - cpu0 + selfCPU() - self0, items}
}

// splitLines cuts an NDJSON body into bodies of at most n lines.
func splitLines(body []byte, n int) [][]byte {
	var out [][]byte
	for len(body) > 0 {
		end, k := 0, 0
		for k < n && end < len(body) {
			i := bytes.IndexByte(body[end:], '\n')
			if i < 0 {
				end = len(body)
			} else {
				end += i + 1
			}
			k++
		}
		out = append(out, body[:end])
		body = body[end:]
	}
	return out
}

// redisHTTP is what the redis-http table's runs share.
type redisHTTP struct {
	reps, n   int
	dir, bin  string
	rdb       *redis.Client
	port      string
	redisPid  int
	body      []byte // the items as NDJSON {"item": ...}
	ndjson    string // body's file, for replay
	t         *Table
	best      map[string]pipeRun // reference Redis runs by name
	redisName string
}

// Batch sizes of the mlstream feeds: lines a request.
const httpBatchSmall, httpBatchBig = 1000, 10_000

// redisHTTPTable measures a distinct job (and a heavy_hitters job) over
// HTTP against Redis fed by redis-cli --pipe.
func redisHTTPTable(quick bool, reps int) {
	n := 1_000_000
	if quick {
		n = 200_000
	}
	rdb, stop, note, ok := ensureRedis()
	if !ok {
		return
	}
	defer stop()
	bin, err := buildBinary()
	if err != nil {
		skipped("Redis over HTTP", err)
		return
	}
	defer os.RemoveAll(filepath.Dir(bin))
	dir, err := os.MkdirTemp("", "mlstream-vsredis")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	rh := &redisHTTP{reps: reps, n: n, dir: dir, bin: bin, rdb: rdb, best: map[string]pipeRun{}}
	rh.port = rdb.Options().Addr[strings.LastIndexByte(rdb.Options().Addr, ':')+1:]
	rh.redisPid = redisPid(rdb)
	rh.redisName = "Redis " + redisVersion(context.Background(), rdb)
	items, counts, body := zipfStream(n)
	rh.body, rh.ndjson = body, filepath.Join(dir, "items.ndjson")
	if err := os.WriteFile(rh.ndjson, body, 0o644); err != nil {
		panic(err)
	}
	rh.t = newTable("redis-http", "Ahead of Redis: mlstream over HTTP against redis-cli --pipe", "",
		"system", "how", "items", "wall s", "items/s", "CPU s, all processes", "items per CPU s", "against", "÷ against, items/s", "÷ against, items per CPU s", "target")
	rh.redisRows(items, len(counts))
	rh.mlstreamRows()
	rh.t.Note = rh.note(note)
	rh.t.Print()
}

// redisPid is redis-server's process id, from INFO server.
func redisPid(rdb *redis.Client) int {
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		panic(err)
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
			pid, _ := strconv.Atoi(v)
			return pid
		}
	}
	panic("INFO server has no process_id")
}

// redisRows writes the RESP files and times redis-cli --pipe on each:
// PFADD of one item a command, of redisBatch items a command, and
// ZINCRBY of one item a command. It checks that Redis holds what it was
// sent: a PFCOUNT near the distinct items, a ZCARD equal to them.
func (rh *redisHTTP) redisRows(items []string, distinct int) {
	type feed struct {
		name, how, key string
		cmds           int
		write          func(emit func(args ...string))
	}
	feeds := []feed{
		{"pfadd1", "PFADD of 1 item a command, redis-cli --pipe", "hll", len(items), func(emit func(...string)) {
			for _, it := range items {
				emit("PFADD", "hll", it)
			}
		}},
		{"pfadd1000", fmt.Sprintf("PFADD of %s items a command, redis-cli --pipe", humanize(redisBatch)), "hll", (len(items) + redisBatch - 1) / redisBatch, func(emit func(...string)) {
			for lo := 0; lo < len(items); lo += redisBatch {
				emit(append([]string{"PFADD", "hll"}, items[lo:min(lo+redisBatch, len(items))]...)...)
			}
		}},
		{"zincrby", "ZINCRBY key 1 item a command, redis-cli --pipe", "top", len(items), func(emit func(...string)) {
			for _, it := range items {
				emit("ZINCRBY", "top", "1", it)
			}
		}},
	}
	for _, f := range feeds {
		file := filepath.Join(rh.dir, f.name+".resp")
		respCommands(file, f.write)
		r := medianPipe(rh.reps, func() pipeRun { return redisPipe(rh.rdb, rh.port, rh.redisPid, f.key, file, f.cmds, len(items)) })
		os.Remove(file)
		rh.checkRedis(f.key, distinct)
		rh.best[f.name] = r
		rh.t.Row(rh.redisName, f.how, r.items, num(r.wall, "%.3f"), r.rate(), num(r.cpu, "%.2f"), r.cpuRate(), "-", "-", "-", "")
	}
}

// checkRedis panics unless key holds the distinct items: a HyperLogLog
// within 5% of them (its standard error is 0.81%), or a sorted set with
// one member each.
func (rh *redisHTTP) checkRedis(key string, distinct int) {
	ctx := context.Background()
	if key == "hll" {
		est, err := rh.rdb.PFCount(ctx, key).Result()
		if err != nil || float64(est) < 0.95*float64(distinct) || float64(est) > 1.05*float64(distinct) {
			panic(fmt.Sprintf("Redis PFCOUNT %s = %d (%v) after the pipe; %d distinct items were sent", key, est, err, distinct))
		}
		return
	}
	if card, err := rh.rdb.ZCard(ctx, key).Result(); err != nil || card != int64(distinct) {
		panic(fmt.Sprintf("Redis ZCARD %s = %d (%v) after the pipe; %d distinct items were sent", key, card, err, distinct))
	}
}

// redisBest is the Redis PFADD run with the highest items/s and the one
// with the most items per CPU second.
func (rh *redisHTTP) redisBest() (wall, cpu pipeRun) {
	a, b := rh.best["pfadd1"], rh.best["pfadd1000"]
	wall, cpu = a, a
	if b.rate() > a.rate() {
		wall = b
	}
	if b.cpuRate() > a.cpuRate() {
		cpu = b
	}
	return wall, cpu
}

// mlstreamRows starts the binary with a distinct job, a heavy_hitters
// job, and both on one stream, and feeds each the NDJSON items.
func (rh *redisHTTP) mlstreamRows() {
	const (
		distinct = `{"name":"d","kind":"distinct","input":"s","partitions":2,"params":{"field":"item"}}`
		heavy    = `{"name":"h","kind":"heavy_hitters","input":"s","partitions":2,"params":{"field":"item","counters":2000}}`
	)
	bestWall, bestCPU := rh.redisBest()
	pfaddRef := func(r pipeRun) (string, cell, cell, string) {
		return "Redis PFADD, best (" + humanize(bestWall.rate()) + " items/s; " + humanize(bestCPU.cpuRate()) + " items per CPU s)",
			num(r.rate()/bestWall.rate(), "%.2f"), num(r.cpuRate()/bestCPU.cpuRate(), "%.2f"), ">= 1"
	}
	zin := rh.best["zincrby"]
	zincrbyRef := func(r pipeRun) (string, cell, cell, string) {
		return "Redis ZINCRBY --pipe", num(r.rate()/zin.rate(), "%.2f"), num(r.cpuRate()/zin.cpuRate(), "%.2f"), ">= 2"
	}
	rh.mlstreamConfig("distinct job (p = 14, 2 partitions)", []string{distinct}, []string{"d"}, true, pfaddRef)
	rh.mlstreamConfig("heavy_hitters job (2,000 counters, 2 partitions)", []string{heavy}, []string{"h"}, false, zincrbyRef)
	rh.mlstreamConfig("distinct and heavy_hitters jobs on one stream", []string{distinct, heavy}, []string{"d", "h"}, false, zincrbyRef)
}

// mlstreamConfig starts a server with jobs and adds a row per feed: replay
// with big batches and, if allFeeds, replay with small batches and the
// client package in process.
func (rh *redisHTTP) mlstreamConfig(what string, jobs, names []string, allFeeds bool, ref func(pipeRun) (string, cell, cell, string)) {
	srv, err := startMlstream(rh.bin, rh.dir, `{"jobs":[`+strings.Join(jobs, ",")+`]}`, names...)
	if err != nil {
		skipped("mlstream binary", err)
		return
	}
	defer srv.stop()
	type feed struct {
		how string
		run func() pipeRun
	}
	replay := func(batch int) feed {
		return feed{fmt.Sprintf("mlstream replay --batch %s (2 requests in flight)", humanize(float64(batch))), func() pipeRun { return srv.feedReplay(rh.bin, rh.ndjson, rh.n, batch) }}
	}
	feeds := []feed{replay(httpBatchBig)}
	if allFeeds {
		bodies := splitLines(rh.body, httpBatchBig)
		feeds = append(feeds, replay(httpBatchSmall), feed{fmt.Sprintf("client package in process, %s lines a request, 2 goroutines", humanize(httpBatchBig)), func() pipeRun { return srv.feedClient(bodies, rh.n, 2) }})
	}
	for _, f := range feeds {
		r := medianPipe(rh.reps, f.run)
		against, rw, rc, target := ref(r)
		rh.t.Row("mlstream "+what, f.how, r.items, num(r.wall, "%.3f"), r.rate(), num(r.cpu, "%.2f"), r.cpuRate(), against, rw, rc, target)
	}
}

func (rh *redisHTTP) note(installed string) string {
	return fmt.Sprintf("%s items drawn Zipf(1.1) from 100,000 (the stream of the Redis tables above), median of %d runs by wall time; the ratios divide figures of this one run. "+
		"**%s**: redis-server started by this run on a loopback port without persistence; redis-cli --pipe sends a file of RESP commands, written before timing, as fast as the server takes them, and waits for the last reply (checked: no errors, one reply a command; after, PFCOUNT within 5%% of the distinct items and ZCARD equal to them). "+
		"Wall: redis-cli's run; CPU: redis-cli's (rusage) plus redis-server's over the run (the run time of its threads, /proc/PID/task/*/schedstat, in ns). "+
		"**mlstream**: the real binary (go build ./cmd/mlstream), `serve` with no fault tolerance (--data \"\"), jobs declared in its config, fed the items as NDJSON lines {\"item\": ...} over HTTP on loopback; as every job on the stream reads that one string field, the server takes these lines by its string fast path (scanned, not parsed; the distinct job gets their hashes). "+
		"Wall: from the first request until every job reports all items processed (GET /v1/jobs/NAME polled every 2 ms); CPU: the server's (likewise from schedstat) plus the feeder's (`mlstream replay`'s rusage, or this benchmark process's own, which does nothing else meanwhile). "+
		"The machine has 2 cores, shared by client and server on both sides.%s",
		humanize(float64(rh.n)), rh.reps, rh.redisName, installed)
}
