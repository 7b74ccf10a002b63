package shm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hecsys/hec/host/handoff"
	"github.com/hecsys/hec/host/handoff/shm"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/wire"
	"github.com/hecsys/hec/test/handofftest"
)

// lyingRegion formats a region of one queue pair whose agent, a loop of
// the test's, completes each descriptor with what lie makes of it (after
// lie may write the window).
func lyingRegion(t *testing.T, lie func(win *ring.MappedWindow, req wire.Desc) wire.Desc) string {
	t.Helper()
	path := filepath.Join("/dev/shm", fmt.Sprintf("hec-lying-%d-%s", os.Getpid(), filepath.Base(t.TempDir())))
	g := ring.Geometry{QueuePairs: 1, Entries: 8, WindowSize: 64 << 10}
	size, err := g.Size()
	if err != nil {
		t.Fatal(err)
	}
	r, err := ring.Map(path, size, true)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ring.Format(r, ring.AgentConfig{Geometry: g, LeaseTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		var in [8]ring.Incoming
		last := time.Time{}
		for {
			select {
			case <-done:
				return
			default:
			}
			if now := time.Now(); now.Sub(last) > 5*time.Millisecond {
				a.Housekeep(now)
				last = now
			}
			for _, qp := range a.QueuePairs() {
				n := qp.Take(in[:])
				for _, d := range in[:n] {
					resp := lie(qp.Window(), d.Desc)
					qp.Complete(&resp)
				}
				qp.Publish()
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()
	t.Cleanup(func() { close(done); <-stopped; r.Close(); os.Remove(path) })
	return path
}

// TestALyingAgent: what an agent writes in a completion is not trusted
// over shared memory either: output spans past the window, over the
// input's staging or past the Out buffer are not copied into the
// caller's memory; the call ends with the agent's answer and only the
// output that lies in its Out buffer is placed.
func TestALyingAgent(t *testing.T) {
	// The request: 8 input bytes of the caller's memory (staged in the
	// window: span 0) and an Out buffer of 16 (span 1).
	type lie func(win *ring.MappedWindow, req wire.Desc) []wire.Span
	for _, tc := range []struct {
		name   string
		spans  lie
		placed []byte
	}{
		{"a span past the window", func(win *ring.MappedWindow, req wire.Desc) []wire.Span {
			return []wire.Span{{Off: uint32(win.Len() - 4), Len: 16}, {Off: 1 << 31, Len: 1 << 20}}
		}, nil},
		{"a span over the input's staging", func(win *ring.MappedWindow, req wire.Desc) []wire.Span {
			win.WriteAt([]byte("XXXXXXXX"), uint64(req.Spans[0].Off)) //nolint:errcheck // in the window
			return []wire.Span{req.Spans[0]}
		}, nil},
		{"a span past the Out buffer's end", func(win *ring.MappedWindow, req wire.Desc) []wire.Span {
			return []wire.Span{{Off: req.Spans[1].Off + 12, Len: 8}}
		}, nil},
		{"an honest output beside lying ones", func(win *ring.MappedWindow, req wire.Desc) []wire.Span {
			win.WriteAt([]byte("good"), uint64(req.Spans[1].Off+4)) //nolint:errcheck // in the window
			return []wire.Span{{Off: 1 << 31, Len: 8}, {Off: req.Spans[1].Off + 4, Len: 4}, req.Spans[0]}
		}, []byte("good")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := lyingRegion(t, func(win *ring.MappedWindow, req wire.Desc) wire.Desc {
				resp := wire.Desc{Op: req.Op, Tag: req.Tag, Arg0: 7}
				if req.Op == wire.OpKVGet {
					sp := tc.spans(win, req)
					resp.NSpan = uint8(copy(resp.Spans[:], sp))
				}
				return resp
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			tr, err := shm.Dial(ctx, path, handoff.Options{}.Defaults())
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			handofftest.AskALiar(t, tr, tc.placed, false)
		})
	}
}
