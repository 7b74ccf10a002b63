package dpu

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/trace"
)

// otlpReceiver is an OTLP/HTTP trace receiver, as an OpenTelemetry
// collector's otlp receiver takes spans: protobuf requests at /v1/traces.
type otlpReceiver struct {
	mu       sync.Mutex
	spans    []collected
	service  string
	requests int
	refuse   bool // answer 503, as a collector that is down for a while
}

type collected struct {
	name, traceID string
	attrs         map[string]string
	start, end    uint64
}

func (c *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests++
	if c.refuse {
		http.Error(w, "not now", http.StatusServiceUnavailable)
		return
	}
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want protobuf at /v1/traces", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				c.service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				got := collected{name: sp.Name, traceID: hex.EncodeToString(sp.TraceId), attrs: map[string]string{},
					start: sp.StartTimeUnixNano, end: sp.EndTimeUnixNano}
				for _, a := range sp.Attributes {
					if v := a.GetValue(); v.GetStringValue() != "" {
						got.attrs[a.Key] = v.GetStringValue()
					} else {
						got.attrs[a.Key] = fmt.Sprint(v.GetIntValue())
					}
				}
				c.spans = append(c.spans, got)
			}
		}
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func (c *otlpReceiver) snapshot() ([]collected, string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]collected(nil), c.spans...), c.service, c.requests
}

// TestOTLPExportsTheOpsSpans: with --otlp, an agent records its ops' spans
// all the time and exports them to the collector: an EC encode's serve and
// code spans arrive under one trace id (the SHA-256 of the op's id), with
// the op's id, stage and times, from service hecd; a collector that
// refuses for a while loses spans but not the agent, which serves on and
// says so in its status; without --otlp nothing records.
func TestOTLPExportsTheOpsSpans(t *testing.T) {
	col := &otlpReceiver{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	dir := t.TempDir()
	shm := filepath.Join("/dev/shm", fmt.Sprintf("hec-dpu-otlp-%d-%d", os.Getpid(), time.Now().UnixNano()))
	t.Cleanup(func() { os.Remove(shm) })
	cfg := Config{
		Agent: AgentConfig{Shm: shm, RegionSize: 32 << 20, QueuePairs: 2, TCP: Off, Mgmt: Off, StateDir: dir},
		RESP:  RESPConfig{Addr: Off}, UDP: UDPConfig{Addr: Off}, Trace: TraceConfig{OTLP: srv.URL},
	}
	a := runAgent(t, cfg)
	if !a.Dispatcher().Trace().On() {
		t.Fatal("--otlp: the agent does not record")
	}
	ctx := context.Background()
	c, err := host.Dial(ctx, "shm://"+shm)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e, err := c.EC(4, 2, host.WithRails(host.RailsDPU))
	if err != nil {
		t.Fatal(err)
	}
	buf, err := c.Alloc(6 * (256 << 10))
	if err != nil {
		t.Fatal(err)
	}
	shards := make([][]byte, 6)
	for i := range shards {
		shards[i] = buf[i*(256<<10) : (i+1)*(256<<10)]
	}
	encode := func(n int) {
		for range n {
			if _, err := e.Encode(ctx, shards); err != nil {
				t.Fatal(err)
			}
		}
	}
	encode(10)
	var spans []collected
	var service string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if spans, service, _ = col.snapshot(); len(spans) >= 20 {
			break
		}
	}
	if service != "hecd" {
		t.Errorf("service.name %q, want hecd", service)
	}
	byTrace := map[string]map[string]collected{}
	for _, s := range spans {
		if byTrace[s.traceID] == nil {
			byTrace[s.traceID] = map[string]collected{}
		}
		byTrace[s.traceID][s.attrs["hec.stage"]] = s
	}
	complete := 0
	for tid, stages := range byTrace {
		serve, code := stages[trace.StageServe], stages[trace.StageCode]
		if serve.name == "" || code.name == "" {
			continue
		}
		complete++
		id := serve.attrs["hec.op.id"]
		if want := OTLPTraceID(id).String(); tid != want || code.attrs["hec.op.id"] != id {
			t.Errorf("op %q: trace id %s (want %s), code span's op %q", id, tid, want, code.attrs["hec.op.id"])
		}
		if serve.name != "ec_encode serve" || code.start < serve.start || code.end > serve.end || serve.end <= serve.start {
			t.Errorf("op %q: serve %q %d–%d, code %q %d–%d", id, serve.name, serve.start, serve.end, code.name, code.start, code.end)
		}
	}
	if complete < 10 {
		t.Fatalf("%d ops with their serve and code spans among %d spans, want the 10 encodes", complete, len(spans))
	}
	// A collector that refuses: the agent serves on, and says why.
	col.mu.Lock()
	col.refuse = true
	col.mu.Unlock()
	encode(10)
	for deadline := time.Now().Add(otlpRetryFor + 10*time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if st := serviceRow(a, "otlp"); strings.Contains(st.Note, "last export error") {
			break
		}
	}
	st := serviceRow(a, "otlp")
	t.Logf("otlp status after refusals: %s", st.Note)
	if !st.Served || !strings.Contains(st.Note, "last export error") || !strings.Contains(st.Note, "spans exported") {
		t.Errorf("status after refusals: %+v", st)
	}
	col.mu.Lock()
	col.refuse = false
	col.mu.Unlock()
	before, _, _ := col.snapshot()
	encode(10)
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if after, _, _ := col.snapshot(); len(after) > len(before) {
			return
		}
	}
	t.Fatal("no span exported once the collector took them again")
}

// serviceRow is a's status row of the service named name.
func serviceRow(a *Agent, name string) (row struct {
	Served bool
	Note   string
}) {
	for _, s := range a.Status().Services {
		if s.Name == name {
			row.Served, row.Note = s.Served, s.Note
		}
	}
	return row
}

// TestOTLPConfig: the endpoint must be an http(s) URL with a host, the
// sample a share; off records nothing.
func TestOTLPConfig(t *testing.T) {
	for _, tc := range []struct {
		c  TraceConfig
		ok bool
	}{
		{TraceConfig{OTLP: Off, OTLPSample: 1}, true},
		{TraceConfig{OTLP: "http://127.0.0.1:4318", OTLPSample: 1}, true},
		{TraceConfig{OTLP: "https://collector.example:4318/custom/path", OTLPSample: 0.01}, true},
		{TraceConfig{OTLP: "127.0.0.1:4318", OTLPSample: 1}, false},
		{TraceConfig{OTLP: "grpc://127.0.0.1:4317", OTLPSample: 1}, false},
		{TraceConfig{OTLP: "http://", OTLPSample: 1}, false},
		{TraceConfig{OTLP: Off, OTLPSample: 0}, false},
		{TraceConfig{OTLP: Off, OTLPSample: 1.5}, false},
	} {
		if err := tc.c.validate(); (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("%+v: %v, want ok %v", tc.c, err, tc.ok)
		}
	}
	s := newOTLPService(TraceConfig{OTLP: Off, OTLPSample: 1})
	if s.on() {
		t.Fatal("off is on")
	}
}

// discard is an exporter that takes every batch and keeps nothing.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkExportSpan is what exporting costs the agent per recorded span:
// the conversion into the SDK's span and its batching, the collector's
// side left out.
func BenchmarkExportSpan(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(discard{}, sdktrace.WithMaxQueueSize(trace.DefaultCapacity)))
	defer tp.Shutdown(context.Background())
	tracer := tp.Tracer("bench")
	sp := trace.Span{ID: trace.OpID(trace.Origin(4711, 1), 0x2a), Name: "ec_encode", Stage: trace.StageServe,
		Start: time.Now().UnixNano(), Dur: 65_000, Status: "ok", Bytes: 1 << 20}
	b.ReportAllocs()
	for b.Loop() {
		exportSpan(tracer, sp)
	}
}
