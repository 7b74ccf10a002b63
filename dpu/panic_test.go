package dpu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hecsys/hec/kv"
	"github.com/hecsys/hec/shared/panics"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/wire"
)

// TestHandlerPanicIsContained: a handler that panics, run inline on the
// poller, on a worker, detached or for a stream transport, fails its own
// request with StatusInternal and is counted in hec_panics_total; the
// same queue pair's next request, and a PING, are served as before.
func TestHandlerPanicIsContained(t *testing.T) {
	const op = wire.Op(0x7fe2)
	panicsOf := func() uint64 { return panics.Count("op/" + op.String()) }
	for _, tt := range []struct {
		name string
		h    Handler
	}{
		{"inline", Handler{Inline: true}},
		{"worker", Handler{}},
		{"detached", Handler{Detached: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := heapAgent(t, 1)
			h, err := ring.Attach(a.Region())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			d := NewDispatcher(slog.New(slog.DiscardHandler), 1)
			hd := tt.h
			hd.Serve = func(_ context.Context, req *Request, resp *wire.Desc) {
				if req.Arg0 == 1 {
					panic("a bug: assignment to entry in nil map")
				}
				resp.Arg0 = req.Arg0 + 100
			}
			d.Handle(op, hd)
			var beat atomic.Int64
			done := make(chan struct{})
			go func() { defer close(done); d.RunShm(ctx, a, &beat) }()
			defer func() { cancel(); <-done }()
			q, err := h.Lease(ctx, -1)
			if err != nil {
				t.Fatal(err)
			}
			before := panicsOf()
			for i, want := range []struct {
				op     wire.Op
				arg    uint64
				status wire.Status
			}{{op, 1, wire.StatusInternal}, {op, 2, wire.StatusOK}, {wire.OpPing, 3, wire.StatusOK}, {op, 1, wire.StatusInternal}, {op, 4, wire.StatusOK}} {
				if q.Submit([]wire.Desc{{Op: want.op, Tag: uint64(i), Arg0: want.arg}}) != 1 {
					t.Fatal("no room to submit")
				}
				var got [1]wire.Desc
				for n := 0; n == 0; {
					if n, err = q.Poll(got[:]); err != nil {
						t.Fatal(err)
					}
					if ctx.Err() != nil {
						t.Fatalf("request %d: no completion", i)
					}
				}
				if got[0].Status != want.status || got[0].Tag != uint64(i) {
					t.Fatalf("request %d (%v, arg %d): completion %+v, want status %v", i, want.op, want.arg, got[0], want.status)
				}
			}
			if n := panicsOf() - before; n != 2 {
				t.Errorf("the op's panics rose by %d, want 2", n)
			}
		})
	}
	t.Run("stream", func(t *testing.T) {
		d := NewDispatcher(slog.New(slog.DiscardHandler), 1)
		d.Handle(op, Handler{Serve: func(context.Context, *Request, *wire.Desc) { panic("a bug") }})
		var resp wire.Desc
		d.ServeFrame(context.Background(), 0, &wire.Desc{Op: op, Tag: 9}, nil, &resp)
		if resp.Status != wire.StatusInternal || resp.Tag != 9 {
			t.Fatalf("completion %+v, want StatusInternal", resp)
		}
		d.ServeFrame(context.Background(), 0, &wire.Desc{Op: wire.OpPing, Tag: 10, Arg0: 5}, nil, &resp)
		if resp.Status != wire.StatusOK || resp.Arg0 != 5 {
			t.Fatalf("PING after the panic: %+v", resp)
		}
	})
}

// TestStoreFailureStopsTheAgent: when the store's committer panics (here
// in the write hook the XDP cache sets, which runs on it) the store may be
// half way through a round: the write is not acknowledged, and the agent
// stops with the error, for its supervisor to start it again.
func TestStoreFailureStopsTheAgent(t *testing.T) {
	a, err := New(Config{Agent: AgentConfig{Shm: Off, TCP: Off, Mgmt: Off, StateDir: t.TempDir()},
		RESP: RESPConfig{Addr: "127.0.0.1:0"}, UDP: UDPConfig{Addr: Off}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("agent: %v", err)
	}
	a.shared.OnWrite(func(key []byte) {
		if string(key) == "boom" {
			panic("a bug in the hook")
		}
	})
	c, err := net.DialTimeout("tcp", a.Addr("resp"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	for _, tt := range []struct{ cmd, reply string }{
		{"SET a 1", "+OK"},
		{"SET boom 1", "-ERR internal error"},
	} {
		fmt.Fprintf(c, "%s\r\n", tt.cmd)
		line, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, tt.reply) {
			t.Fatalf("%s: %q, %v; want %s…", tt.cmd, line, err, tt.reply)
		}
	}
	select {
	case err := <-done:
		if !errors.Is(err, kv.ErrFailed) {
			t.Fatalf("the agent stopped with %v, want kv.ErrFailed", err)
		}
	case <-ctx.Done():
		t.Fatal("the agent went on with a failed store")
	}
	// The metric the agent exports.
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(a))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "hec_panics_total" && len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == "kv/committer" {
				found = m.GetCounter().GetValue() >= 1
			}
		}
	}
	if !found {
		t.Error(`hec_panics_total{where="kv/committer"} is not counted`)
	}
}
