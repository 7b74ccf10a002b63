package dpu

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/trace"
)

// TraceConfig exports the ops' spans to an OpenTelemetry collector, where
// users already collect traces.
type TraceConfig struct {
	// OTLP is a collector's OTLP/HTTP endpoint: http://HOST:4318 (the
	// path /v1/traces is added) or a URL with its own path, used as is.
	// The agent then records its ops' spans all the time (as hecctl trace
	// record does for a while) and exports them every second. Default
	// off.
	OTLP string `toml:"otlp"`
	// OTLPSample is the share of ops whose spans are exported (above 0, up
	// to 1), chosen by the op's id so that an op's spans go together.
	// Default 1.
	OTLPSample float64 `toml:"otlp_sample"`
}

func (c *TraceConfig) withDefaults() error {
	defString(&c.OTLP, Off)
	if c.OTLPSample == 0 {
		c.OTLPSample = 1
	}
	return nil
}

func (c *TraceConfig) validate() error {
	if c.OTLP != Off {
		u, err := url.Parse(c.OTLP)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--otlp %q: want http://HOST:PORT or https://HOST:PORT (a collector's OTLP/HTTP endpoint), or off: %w", c.OTLP, ErrConfig)
		}
	}
	if !(c.OTLPSample > 0 && c.OTLPSample <= 1) {
		return fmt.Errorf("--otlp-sample %v: want a share above 0, up to 1: %w", c.OTLPSample, ErrConfig)
	}
	return nil
}

func (c *TraceConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.OTLP, "otlp", c.OTLP, "export the ops' spans to this OpenTelemetry collector (OTLP/HTTP, e.g. http://127.0.0.1:4318), recording them all the time; or off")
	fs.Float64Var(&c.OTLPSample, "otlp-sample", c.OTLPSample, "the share of ops whose spans --otlp exports (above 0, up to 1; by op id)")
}

// otlpEvery is how often the recorded spans go to the exporter (which
// batches them on its own); otlpRetryFor how long a refused batch is
// tried again.
const (
	otlpEvery    = time.Second
	otlpRetryFor = 5 * time.Second
)

// countingExporter counts what the collector took and what it did not,
// and keeps the last refusal for the status.
type countingExporter struct {
	sdktrace.SpanExporter
	s *otlpService
}

func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.s.failed.Add(uint64(len(spans)))
		e.s.noteErr(err)
		return err
	}
	e.s.exported.Add(uint64(len(spans)))
	return nil
}

// otlpService records the ops' spans and exports them over OTLP/HTTP
// (the OpenTelemetry Go SDK's batching exporter).
type otlpService struct {
	cfg TraceConfig
	log *slog.Logger
	rec *trace.Recorder
	tp  *sdktrace.TracerProvider

	end  func()        // the recording, once started
	done chan struct{} // closed when the export loop has drained and returned

	queued, exported, failed, lost atomic.Uint64
	lastErr                        atomic.Pointer[string]
	logged                         atomic.Int64 // when an export error was last logged (Unix seconds)
	stopOnce                       sync.Once
}

// noteErr keeps err for the status and logs it, at most once a minute.
func (s *otlpService) noteErr(err error) {
	msg := err.Error()
	s.lastErr.Store(&msg)
	if now := time.Now().Unix(); now-s.logged.Load() >= 60 {
		s.logged.Store(now)
		s.log.Warn("otlp: exporting spans", "endpoint", s.cfg.OTLP, "err", err)
	}
}

func newOTLPService(c TraceConfig) *otlpService { return &otlpService{cfg: c} }

func (s *otlpService) Name() string { return "otlp" }

func (s *otlpService) on() bool { return s.cfg.OTLP != Off }

func (s *otlpService) Open(ctx context.Context, env *Env) error {
	if !s.on() {
		return nil
	}
	endpoint := s.cfg.OTLP
	if u, _ := url.Parse(endpoint); u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
		endpoint = u.String()
	}
	// A batch the collector refuses is tried again for a few seconds,
	// then given up: the spans recorded meanwhile wait in the SDK's queue
	// (at most a recorder's worth), and what does not fit is dropped.
	client, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: true, InitialInterval: 500 * time.Millisecond,
			MaxInterval: 2 * time.Second, MaxElapsedTime: otlpRetryFor}))
	if err != nil {
		return fmt.Errorf("--otlp %s: %w", s.cfg.OTLP, err)
	}
	exp := &countingExporter{SpanExporter: client, s: s}
	host, _ := os.Hostname()
	res := resource.NewSchemaless(attribute.String("service.name", "hecd"), attribute.String("service.version", env.Version),
		attribute.String("service.instance.id", traceProc()), attribute.String("host.name", host))
	s.tp = sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(otlpEvery), sdktrace.WithMaxQueueSize(trace.DefaultCapacity)))
	s.log, s.rec = env.Log, env.Dispatcher.Trace()
	// What else the SDK says went wrong (a full queue), through its
	// global handler.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(s.noteErr))
	return nil
}

func (s *otlpService) Start(ctx context.Context, env *Env) error {
	if !s.on() {
		return nil
	}
	s.end, s.done = s.rec.Begin(), make(chan struct{})
	tracer := s.tp.Tracer("github.com/hecsys/hec/dpu")
	env.Go(func() {
		defer close(s.done)
		m := s.rec.Mark()
		t := time.NewTicker(otlpEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				s.drain(tracer, &m)
				return
			case <-t.C:
				s.drain(tracer, &m)
			}
		}
	})
	return nil
}

// drain hands the spans recorded since m to the exporter and moves m on.
func (s *otlpService) drain(tracer oteltrace.Tracer, m *trace.Mark) {
	spans, lost := s.rec.Since(*m)
	*m = trace.Mark(uint64(*m) + lost + uint64(len(spans)))
	s.lost.Add(lost)
	for _, sp := range spans {
		if s.sampled(sp.ID) {
			exportSpan(tracer, sp)
			s.queued.Add(1)
		}
	}
}

// sampled says whether the op of id is among OTLPSample of them.
func (s *otlpService) sampled(id string) bool {
	if s.cfg.OTLPSample >= 1 {
		return true
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	return float64(h.Sum64())/math.MaxUint64 < s.cfg.OTLPSample
}

// OTLPTraceID is the trace id an op's spans are exported under: the first
// 16 bytes of the SHA-256 of its id (trace.OpID, trace.CollID), so that
// every span of an op, from any agent, lands in one trace.
func OTLPTraceID(id string) oteltrace.TraceID {
	tid, _ := otlpIDs(id)
	return tid
}

// otlpIDs are op id's trace id (OTLPTraceID) and the span id of the
// parent its spans name, which no one exports: the SHA-256 of the id, its
// first 16 bytes and the next 8.
func otlpIDs(id string) (oteltrace.TraceID, oteltrace.SpanID) {
	sum := sha256.Sum256([]byte(id))
	return oteltrace.TraceID(sum[:16]), oteltrace.SpanID(sum[16:24])
}

// exportSpan gives one recorded span to the tracer, with its times: a
// child of a parent no one exports (the op, by its trace id).
func exportSpan(tracer oteltrace.Tracer, sp trace.Span) {
	tid, parentID := otlpIDs(sp.ID)
	parent := oteltrace.NewSpanContext(oteltrace.SpanContextConfig{TraceID: tid,
		SpanID: parentID, TraceFlags: oteltrace.FlagsSampled, Remote: true})
	ctx := oteltrace.ContextWithRemoteSpanContext(context.Background(), parent)
	_, span := tracer.Start(ctx, sp.Name+" "+sp.Stage, oteltrace.WithSpanKind(oteltrace.SpanKindServer),
		oteltrace.WithTimestamp(time.Unix(0, sp.Start)),
		oteltrace.WithAttributes(attribute.String("hec.op.id", sp.ID), attribute.String("hec.op", sp.Name),
			attribute.String("hec.stage", sp.Stage), attribute.Int64("hec.bytes", sp.Bytes)))
	if sp.Peer != "" { // a message's other end: "rank 2", "node 3"
		span.SetAttributes(attribute.String("hec.peer", sp.Peer))
	}
	if sp.Status != "" {
		span.SetAttributes(attribute.String("hec.status", sp.Status))
		if sp.Status != "ok" {
			span.SetStatus(codes.Error, sp.Status)
		}
	}
	span.End(oteltrace.WithTimestamp(time.Unix(0, sp.End())))
}

func (s *otlpService) Stop() {
	s.stopOnce.Do(func() {
		if s.done != nil {
			select {
			case <-s.done: // the loop drained what was left
			case <-time.After(5 * time.Second):
			}
		}
		if s.end != nil {
			s.end()
		}
		if s.tp != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := s.tp.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				s.log.Warn("otlp: flushing the last spans", "err", err)
			}
		}
	})
}

func (s *otlpService) Status() api.Service {
	if !s.on() {
		return api.Service{Name: "otlp", Note: "off (--otlp URL exports the ops' spans to an OpenTelemetry collector)"}
	}
	note := fmt.Sprintf("%d spans exported of %d handed to the exporter, %d refused by the collector, %d lost before export (the recorder's ring full)",
		s.exported.Load(), s.queued.Load(), s.failed.Load(), s.lost.Load())
	if e := s.lastErr.Load(); e != nil {
		note += "; last export error: " + *e
	}
	return api.Service{Name: "otlp", Addr: s.cfg.OTLP, Served: true, Note: note}
}
