package handofftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hecsys/hec/dpu"
	"github.com/hecsys/hec/host/handoff"
	"github.com/hecsys/hec/shared/wire"
)

// Agent is an agent serving the test's transports.
type Agent struct {
	Shm  string // its region's path, where asked for (Serve.Shm)
	TCP  string // its TCP handoff, on loopback
	RDMA string // its RDMA handoff, where asked for (Serve.RDMA)
}

// Serve says what the test's agent serves besides its TCP handoff on
// loopback.
type Serve struct {
	Shm  bool   // a region of two queue pairs in /dev/shm
	RDMA string // the RDMA handoff at this address (the agent runs insecure: the test's device is its own)
}

// Start runs an agent serving what s asks until the test ends.
func Start(t testing.TB, s Serve) Agent {
	t.Helper()
	dir := t.TempDir()
	shm := dpu.Off
	if s.Shm {
		shm = filepath.Join("/dev/shm", fmt.Sprintf("hec-handofftest-%d-%s", os.Getpid(), filepath.Base(dir)))
	}
	cfg := dpu.Config{
		Agent: dpu.AgentConfig{Shm: shm, RegionSize: 16 << 20, QueuePairs: 2, TCP: "127.0.0.1:0", Mgmt: dpu.Off,
			StateDir: dir, Insecure: s.RDMA != ""},
		RESP: dpu.RESPConfig{Addr: dpu.Off}, UDP: dpu.UDPConfig{Addr: dpu.Off},
		RDMA: dpu.RDMAConfig{Listen: s.RDMA},
	}
	a, stop, err := RunAgent(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		if s.Shm {
			os.Remove(shm)
		}
	})
	ag := Agent{TCP: a.Addr("tcp"), RDMA: s.RDMA}
	if s.Shm {
		ag.Shm = shm
	}
	return ag
}

// RunAgent runs an agent on cfg in this process until stop, once it is
// ready (an error: why it stopped before).
func RunAgent(cfg dpu.Config, log *slog.Logger) (a *dpu.Agent, stop func(), err error) {
	if a, err = dpu.New(cfg, log); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case err := <-done:
		cancel()
		return nil, nil, fmt.Errorf("the agent stopped before it was ready: %w", err)
	}
	return a, func() { cancel(); <-done }, nil
}

// Dial makes a transport to the test's agent.
type Dial func(ctx context.Context, o handoff.Options) (handoff.Transport, error)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Run holds the transports dial makes to the contract, each subtest on a
// transport of its own.
func Run(t *testing.T, dial Dial) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, ctx context.Context, tr handoff.Transport)
	}{
		{"a ping", ping},
		{"inputs in and out of the window", inputs},
		{"outputs in the caller's buffers", outputs},
		{"the agent's status", status},
		{"a batch", batch},
		{"concurrent callers", concurrent},
		{"a buffer of the window's size", wholeWindow},
		{"a wait's context", waitContext},
		{"close with ops in flight", closeInFlight},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			tr, err := dial(ctx, handoff.Options{}.Defaults())
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			tc.run(t, ctx, tr)
		})
	}
}

// do runs one op and waits for it.
func do(ctx context.Context, tr handoff.Transport, req handoff.Request) (handoff.Result, error) {
	c := handoff.NewCall(req, nil)
	if err := tr.Submit(ctx, c.One()); err != nil {
		return handoff.Result{}, err
	}
	return wait(ctx, tr, c)
}

// wait waits for c and returns its outcome.
func wait(ctx context.Context, tr handoff.Transport, c *handoff.Call) (handoff.Result, error) {
	if err := tr.Wait(ctx, c); err != nil {
		return handoff.Result{}, err
	}
	if !c.Done() {
		return handoff.Result{}, errors.New("the transport's Wait returned nil before the call was done")
	}
	return c.Outcome()
}

// fill returns n bytes of a pattern of seed's, in b when b is given.
func fill(b []byte, n int, seed byte) []byte {
	if b == nil {
		b = make([]byte, n)
	}
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
	return b
}

func checksum(t *testing.T, ctx context.Context, tr handoff.Transport, b []byte) {
	t.Helper()
	res, err := do(ctx, tr, handoff.Request{Op: wire.OpChecksum, In: [][]byte{b}})
	if err != nil || res.Status != wire.StatusOK {
		t.Fatalf("checksum of %d bytes: %v %v", len(b), res.Status, err)
	}
	if got, want := uint32(res.Arg0), crc32.Checksum(b, castagnoli); got != want {
		t.Fatalf("checksum of %d bytes: %08x, want %08x", len(b), got, want)
	}
}

func ping(t *testing.T, ctx context.Context, tr handoff.Transport) {
	for range 3 {
		res, err := do(ctx, tr, handoff.Request{Op: wire.OpPing})
		if err != nil || res.Status != wire.StatusOK {
			t.Fatalf("ping: %v %v", res.Status, err)
		}
	}
	if tr.String() == "" {
		t.Error("the transport does not describe itself")
	}
}

// inputs: the agent reads what the caller gave, whether the buffer lies
// in the window (Alloc) or not (copied or sent).
func inputs(t *testing.T, ctx context.Context, tr handoff.Transport) {
	for _, n := range []int{0, 1, 4095, 64 << 10, 1 << 20} {
		checksum(t, ctx, tr, fill(nil, n, byte(n)))
		if n == 0 {
			continue
		}
		b, err := tr.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != n {
			t.Fatalf("Alloc(%d) gave %d bytes", n, len(b))
		}
		checksum(t, ctx, tr, fill(b, n, 3))
		if _, _, ok := tr.WindowRuns([][]byte{b}, [][]byte{b}); ok != tr.InWindow(b) {
			t.Errorf("a buffer from Alloc: in the window %v, but a run of the window %v", tr.InWindow(b), ok)
		}
		if err := tr.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if tr.InWindow(make([]byte, 16)) {
		t.Error("memory of the caller's own taken for the window's")
	}
}

// outputs: what the agent writes lands in the request's Out buffers, and
// the result names those bytes.
func outputs(t *testing.T, ctx context.Context, tr handoff.Transport) {
	key := []byte(fmt.Sprintf("handofftest:%p", tr))
	value := fill(nil, 100<<10, 9)
	if res, err := do(ctx, tr, handoff.Request{Op: wire.OpKVPut, In: [][]byte{key, value}}); err != nil || res.Status != wire.StatusOK {
		t.Fatalf("put: %v %v", res.Status, err)
	}
	alloc, err := tr.Alloc(256 << 10)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Free(alloc)
	for name, out := range map[string][]byte{"the caller's memory": make([]byte, 256<<10), "a buffer from Alloc": alloc} {
		clear(out)
		res, err := do(ctx, tr, handoff.Request{Op: wire.OpKVGet, In: [][]byte{key}, Out: [][]byte{out}})
		if err != nil || res.Status != wire.StatusOK {
			t.Fatalf("%s: get: %v %v", name, res.Status, err)
		}
		if res.Arg0 != uint64(len(value)) || len(res.Out) != 1 || !bytes.Equal(res.Out[0], value) {
			t.Fatalf("%s: get: %d bytes in %d parts, want the %d put", name, res.Arg0, len(res.Out), len(value))
		}
		if &res.Out[0][0] != &out[0] || !bytes.Equal(out[:len(value)], value) {
			t.Fatalf("%s: the value is not in the request's Out buffer", name)
		}
	}
	// Room too small: the agent's status and the size it needs.
	res, err := do(ctx, tr, handoff.Request{Op: wire.OpKVGet, In: [][]byte{key}, Out: [][]byte{make([]byte, 10)}})
	if err != nil || res.Status != wire.StatusTooLarge || res.Arg0 != uint64(len(value)) {
		t.Fatalf("get into 10 bytes: %v (needs %d) %v, want %v and %d", res.Status, res.Arg0, err, wire.StatusTooLarge, len(value))
	}
}

// status: an op the agent refuses completes with its status, and the
// transport goes on.
func status(t *testing.T, ctx context.Context, tr handoff.Transport) {
	res, err := do(ctx, tr, handoff.Request{Op: 0x7fff})
	if err != nil || res.Status != wire.StatusBadOp {
		t.Fatalf("an op the agent does not serve: %v %v, want %v", res.Status, err, wire.StatusBadOp)
	}
	res, err = do(ctx, tr, handoff.Request{Op: wire.OpKVGet, In: [][]byte{[]byte("handofftest:absent")}, Out: [][]byte{make([]byte, 64)}})
	if err != nil || res.Status != wire.StatusNotFound {
		t.Fatalf("get of an absent key: %v %v, want %v", res.Status, err, wire.StatusNotFound)
	}
	checksum(t, ctx, tr, fill(nil, 1000, 1))
}

// batch: more calls in one Submit than a ring has entries, waited for
// from the last, each with its own answer.
func batch(t *testing.T, ctx context.Context, tr handoff.Transport) {
	const n = 300
	calls := make([]*handoff.Call, n)
	for i := range calls {
		calls[i] = handoff.NewCall(handoff.Request{Op: wire.OpChecksum, In: [][]byte{fill(nil, 1+i*37, byte(i))}}, nil)
	}
	if err := tr.Submit(ctx, calls); err != nil {
		t.Fatal(err)
	}
	for i := n - 1; i >= 0; i-- {
		res, err := wait(ctx, tr, calls[i])
		in := calls[i].Req.In[0]
		if err != nil || uint32(res.Arg0) != crc32.Checksum(in, castagnoli) {
			t.Fatalf("call %d of the batch: %08x %v", i, res.Arg0, err)
		}
	}
}

// concurrent: callers on several goroutines, each op answered as its own.
func concurrent(t *testing.T, ctx context.Context, tr handoff.Transport) {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				b := fill(nil, 1+(g*100+i)*13%70000, byte(g))
				res, err := do(ctx, tr, handoff.Request{Op: wire.OpChecksum, In: [][]byte{b}})
				if err == nil && uint32(res.Arg0) != crc32.Checksum(b, castagnoli) {
					err = fmt.Errorf("caller %d op %d: checksum %08x of another op's", g, i, res.Arg0)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// wholeWindow: a buffer of Window() bytes is carried in one op.
func wholeWindow(t *testing.T, ctx context.Context, tr handoff.Transport) {
	n := tr.Window()
	if n <= 0 {
		t.Fatalf("window of %d bytes", n)
	}
	b, err := tr.Alloc(n)
	if err != nil {
		t.Fatalf("Alloc of the whole window (%d bytes): %v", n, err)
	}
	defer tr.Free(b)
	checksum(t, ctx, tr, fill(b, n, 5))
}

// waitContext: a wait whose context has ended returns; the call still
// completes, and is waited for after.
func waitContext(t *testing.T, ctx context.Context, tr handoff.Transport) {
	b := fill(nil, 4<<20, 2)
	c := handoff.NewCall(handoff.Request{Op: wire.OpChecksum, In: [][]byte{b}}, nil)
	if err := tr.Submit(ctx, c.One()); err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := tr.Wait(ended, c); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("a wait with an ended context: %v", err)
	}
	res, err := wait(ctx, tr, c)
	if err != nil || uint32(res.Arg0) != crc32.Checksum(b, castagnoli) {
		t.Fatalf("after: %08x %v", res.Arg0, err)
	}
}

// closeInFlight: Close with ops in flight ends every one (the agent's
// answer or a failure) and ends the transport: later ops fail.
func closeInFlight(t *testing.T, ctx context.Context, tr handoff.Transport) {
	b := fill(nil, 1<<20, 4)
	calls := make([]*handoff.Call, 16)
	for i := range calls {
		calls[i] = handoff.NewCall(handoff.Request{Op: wire.OpChecksum, In: [][]byte{b}}, nil)
	}
	if err := tr.Submit(ctx, calls); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	for i, c := range calls {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := tr.Wait(wctx, c)
		cancel()
		if err != nil || !c.Done() {
			t.Fatalf("call %d not ended 10 s after Close: %v", i, err)
		}
		if res, err := c.Outcome(); err == nil && (res.Status != wire.StatusOK || uint32(res.Arg0) != crc32.Checksum(b, castagnoli)) {
			t.Fatalf("call %d: %v %08x and no error", i, res.Status, res.Arg0)
		}
	}
	if _, err := do(ctx, tr, handoff.Request{Op: wire.OpPing}); err == nil {
		t.Fatal("a ping after Close succeeded")
	}
	if err := tr.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// AskALiar runs one op over tr against a lying agent of the test's, which
// answers Arg0 7 to every op of its own: a KV get with 8 bytes of the
// caller's input ("input!!!") and an Out buffer of 16, whose span starts 8
// bytes into the request's memory. The call must end with the agent's
// answer (broken: fail retryably instead), leave the input alone, have
// placed exactly placed (at the Out buffer's 4th byte, the rest of it
// zero), and the transport must serve the next op (a ping: 7).
func AskALiar(t *testing.T, tr handoff.Transport, placed []byte, broken bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in := []byte("input!!!")
	out := make([]byte, 16)
	c := handoff.NewCall(handoff.Request{Op: wire.OpKVGet, In: [][]byte{in}, Out: [][]byte{out}}, nil)
	if err := tr.Submit(ctx, c.One()); err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(ctx, c); err != nil {
		t.Fatalf("the call did not end: %v", err)
	}
	res, err := c.Outcome()
	if broken {
		if err == nil || !wire.IsRetryable(err) {
			t.Fatalf("%v %v, want a retryable failure", res.Status, err)
		}
	} else if err != nil || res.Arg0 != 7 {
		t.Fatalf("%v arg0 %d %v, want the agent's answer (7)", res.Status, res.Arg0, err)
	}
	if string(in) != "input!!!" {
		t.Fatalf("the caller's input was written: %q", in)
	}
	var got []byte
	for _, o := range res.Out {
		got = append(got, o...)
	}
	if !bytes.Equal(got, placed) {
		t.Fatalf("outputs placed %q, want %q", got, placed)
	}
	want := make([]byte, 16)
	copy(want[4:], placed)
	if !bytes.Equal(out, want) {
		t.Fatalf("the Out buffer holds %q, want %q", out, want)
	}
	res, err = do(ctx, tr, handoff.Request{Op: wire.OpPing})
	if err != nil || res.Arg0 != 7 {
		t.Fatalf("the next op: %v %d %v", res.Status, res.Arg0, err)
	}
}
