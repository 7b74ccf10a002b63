package dpu

import (
	"context"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hecsys/hec/shared/mono"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/wire"
)

// TestAccountAfterTheCompletion: a handler's Account runs once the host
// can have the op's completion. On the poller, for a long op, the host
// finds it published before Account starts; whatever the path, Account
// gets what Serve kept, and the end of the op.
func TestAccountAfterTheCompletion(t *testing.T) {
	const op = wire.Op(0x7fe1)
	type kept struct{ tag uint64 }
	t.Run("inline, long: published first", func(t *testing.T) {
		// One P: InlineAlone applies, and an op above InlineMax is long.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		a := heapAgent(t, 1)
		h, err := ring.Attach(a.Region())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d := NewDispatcher(slog.New(slog.DiscardHandler), 1)
		var hq atomic.Pointer[ring.HostQP]
		seen := make(chan int, 1)
		d.Handle(op, Handler{InlineMax: 1, InlineAlone: 4096,
			Serve: func(_ context.Context, req *Request, resp *wire.Desc) {
				req.Kept = &kept{tag: req.Tag}
				resp.Arg0 = 42
			},
			Account: func(req *Request, resp *wire.Desc, end time.Time) {
				k, ok := req.Kept.(*kept)
				if !ok || k.tag != req.Tag || resp.Arg0 != 42 || end.Before(req.start) {
					t.Errorf("Account got kept %v, resp %+v, end %v (start %v)", req.Kept, resp, end, req.start)
				}
				// The host's view, from here: the completion is out.
				var got [4]wire.Desc
				n, err := hq.Load().Poll(got[:])
				if err != nil || n == 1 && got[0].Arg0 != 42 {
					t.Errorf("the host polled %d completions (%+v), %v", n, got[0], err)
				}
				seen <- n
			},
		})
		var beat atomic.Int64
		done := make(chan struct{})
		go func() { defer close(done); d.RunShm(ctx, a, &beat) }()
		defer func() { cancel(); <-done }()
		q, err := h.Lease(ctx, -1)
		if err != nil {
			t.Fatal(err)
		}
		hq.Store(q)
		desc := wire.Desc{Op: op, Tag: 7, NSpan: 1}
		desc.Spans[0] = wire.Span{Off: 0, Len: 64}
		if q.Submit([]wire.Desc{desc}) != 1 {
			t.Fatal("no room to submit")
		}
		select {
		case n := <-seen:
			if n != 1 {
				t.Fatalf("in Account the host found %d completions, want the op's", n)
			}
		case <-ctx.Done():
			t.Fatal("the op was not accounted for")
		}
	})
	t.Run("a stream transport's op", func(t *testing.T) {
		d := NewDispatcher(slog.New(slog.DiscardHandler), 1)
		var accounted atomic.Int32
		d.Handle(op, Handler{
			Serve: func(_ context.Context, req *Request, _ *wire.Desc) { req.Kept = &kept{tag: req.Tag} },
			Account: func(req *Request, _ *wire.Desc, end time.Time) {
				if k, ok := req.Kept.(*kept); !ok || k.tag != 9 || end.After(mono.Now()) {
					t.Errorf("Account got kept %v, end %v", req.Kept, end)
				}
				accounted.Add(1)
			},
		})
		var resp wire.Desc
		d.ServeFrame(context.Background(), 0, &wire.Desc{Op: op, Tag: 9}, nil, &resp)
		if resp.Status != wire.StatusOK || accounted.Load() != 1 {
			t.Fatalf("status %v, accounted %d times", resp.Status, accounted.Load())
		}
	})
}
