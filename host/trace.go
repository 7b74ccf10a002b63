package host

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hecsys/hec/shared/trace"
)

// Tracing. A process started with HEC_TRACE=1 lets hecctl trace record
// ask it for its ops' spans: its first Dial listens on a Unix socket,
// TraceDir()/host-PID.sock, where a request ({"for":"5s"}) starts a
// recording of that long and is answered with the spans (trace.Reply).
// The ops record only during a recording; otherwise each pays one atomic
// load. Without HEC_TRACE nothing listens and nothing is recorded.

// TraceDir is where traced processes listen: $HEC_TRACE_DIR, else
// hec-trace-UID in the temporary directory.
func TraceDir() string {
	if d := os.Getenv("HEC_TRACE_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "hec-trace-"+strconv.Itoa(os.Getuid()))
}

// TraceRequest asks a traced process for a recording.
type TraceRequest struct {
	For string `json:"for"` // a duration, as time.ParseDuration reads it
}

// maxHostTraceFor bounds one recording a process serves.
const maxHostTraceFor = 10 * time.Minute

var processTrace struct {
	once sync.Once
	rec  *trace.Recorder
}

// processTracer returns this process's recorder, listening for hecctl
// at the first call, when HEC_TRACE asks for one; else nil. A socket it
// cannot make is reported on standard error once, and nothing traced.
func processTracer() *trace.Recorder {
	processTrace.once.Do(func() {
		if v := os.Getenv("HEC_TRACE"); v == "" || v == "0" {
			return
		}
		rec := trace.NewRecorder(0)
		if err := serveTrace(rec, TraceDir()); err != nil {
			fmt.Fprintf(os.Stderr, "hec: HEC_TRACE is set but this process cannot be traced: %v\n", err)
			return
		}
		processTrace.rec = rec
	})
	return processTrace.rec
}

// serveTrace listens in dir for trace requests to rec.
func serveTrace(rec *trace.Recorder, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	path := filepath.Join(dir, fmt.Sprintf("host-%d.sock", os.Getpid()))
	os.Remove(path) // a process of the same id before this one left it
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return err
	}
	proc := fmt.Sprintf("host pid %d (%s)", os.Getpid(), filepath.Base(os.Args[0]))
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveTraceConn(rec, proc, c)
		}
	}()
	return nil
}

// serveTraceConn serves one request: its reader is not trusted (a line
// of at most 4 KiB, read within 5 s; a duration within bounds).
func serveTraceConn(rec *trace.Recorder, proc string, c net.Conn) {
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReaderSize(c, 4096).ReadSlice('\n')
	if err != nil {
		return
	}
	var req TraceRequest
	reply := func(r trace.Reply) {
		r.Proc, r.Now = proc, time.Now().UnixNano()
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		json.NewEncoder(c).Encode(r)
	}
	if err := json.Unmarshal(line, &req); err != nil {
		reply(trace.Reply{Error: "not a trace request: " + err.Error()})
		return
	}
	d, err := time.ParseDuration(req.For)
	if err != nil || d <= 0 || d > maxHostTraceFor {
		reply(trace.Reply{Error: fmt.Sprintf("for %q: want a duration above 0 and up to %v", req.For, maxHostTraceFor)})
		return
	}
	c.SetReadDeadline(time.Time{})
	m := rec.Mark()
	end := rec.Begin()
	time.Sleep(d)
	end()
	spans, lost := rec.Since(m)
	reply(trace.Reply{Spans: spans, Lost: lost})
}

// TracedProcess is a traced process's answer to RecordProcesses.
type TracedProcess struct {
	Socket string
	Reply  trace.Reply
	Err    error
}

// RecordProcesses asks every traced process listening in dir (TraceDir)
// for a recording of d, at once, and returns their answers. A socket
// nothing listens on any more (its process ended) is removed.
func RecordProcesses(ctx context.Context, dir string, d time.Duration) ([]TracedProcess, error) {
	socks, err := filepath.Glob(filepath.Join(dir, "host-*.sock"))
	if err != nil {
		return nil, err
	}
	out := make([]TracedProcess, len(socks))
	var wg sync.WaitGroup
	for i, sock := range socks {
		out[i].Socket = sock
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].Reply, out[i].Err = recordProcess(ctx, sock, d)
		}()
	}
	wg.Wait()
	live := out[:0]
	for _, p := range out {
		if errors.Is(p.Err, syscall.ECONNREFUSED) {
			os.Remove(p.Socket)
			continue
		}
		live = append(live, p)
	}
	return live, nil
}

func recordProcess(ctx context.Context, sock string, d time.Duration) (trace.Reply, error) {
	var r trace.Reply
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "unix", sock)
	if err != nil {
		return r, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	c.SetDeadline(time.Now().Add(d + 30*time.Second))
	if err := json.NewEncoder(c).Encode(TraceRequest{For: d.String()}); err != nil {
		return r, err
	}
	if err := json.NewDecoder(io.LimitReader(c, 1<<30)).Decode(&r); err != nil {
		return r, fmt.Errorf("%s: %w", sock, err)
	}
	if r.Error != "" {
		return r, fmt.Errorf("%s: %s", sock, r.Error)
	}
	return r, nil
}
