package e2e

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/wire"
)

// runHelper is the body of a client process.
func runHelper(mode string) int {
	ctx := context.Background()
	c, err := host.Dial(ctx, os.Getenv("HEC_E2E_TARGET"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper dial:", err)
		return 3
	}
	defer c.Close()
	switch mode {
	case "hammer":
		// Checksums of random buffers, checked, for HEC_E2E_FOR; batches
		// of async calls. Exit 0 only if every answer was right.
		// Until standard input closes.
		stop := make(chan struct{})
		go func() { io.Copy(io.Discard, os.Stdin); close(stop) }()
		n, err := hammer(ctx, c, stop, uint64(os.Getpid()))
		if err != nil {
			fmt.Fprintln(os.Stderr, "hammer:", err)
			return 1
		}
		fmt.Println(n)
		return 0
	case "victim":
		// Hammer forever; the test kills us mid-batch.
		fmt.Println("ready")
		os.Stdout.Sync()
		_, err := hammer(ctx, c, make(chan struct{}), uint64(os.Getpid()))
		fmt.Fprintln(os.Stderr, "victim:", err)
		return 1
	}
	return 2
}

// hammer runs batches of 8 checksums (half in window buffers, half staged)
// until stop closes and checks every result; it returns the number of ops.
func hammer(ctx context.Context, c *host.Client, stop <-chan struct{}, seed uint64) (int, error) {
	rng := rand.New(rand.NewPCG(seed, 99))
	const batch = 8
	bufs := make([][]byte, batch)
	for i := range bufs {
		if i%2 == 0 {
			b, err := c.Alloc(16 << 10)
			if err != nil {
				return 0, err
			}
			bufs[i] = b
		} else {
			bufs[i] = make([]byte, 16<<10)
		}
	}
	ops := 0
	reqs := make([]host.Request, batch)
	want := make([]uint32, batch)
	for {
		select {
		case <-stop:
			return ops, nil
		default:
		}
		for i := range reqs {
			b := bufs[i][:rng.IntN(len(bufs[i])+1)]
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			want[i] = crc32.Checksum(b, castagnoli)
			reqs[i] = host.Request{Op: wire.OpChecksum, In: [][]byte{b}}
		}
		calls, err := c.GoBatch(ctx, reqs)
		if err != nil {
			if wire.IsRetryable(err) {
				continue
			}
			return ops, err
		}
		for i, call := range calls {
			r, err := c.Wait(ctx, call)
			if err != nil {
				if wire.IsRetryable(err) {
					continue
				}
				return ops, fmt.Errorf("op %d: %w", ops, err)
			}
			if uint32(r.Arg0) != want[i] {
				return ops, fmt.Errorf("op %d: crc %#x, want %#x (len %d)", ops, r.Arg0, want[i], len(reqs[i].In[0]))
			}
			ops++
		}
	}
}

// checksumLoop runs checksums of random lengths of b (refilled with random
// bytes each time) on c until stop closes, counting each success in ok and
// each retryable error in retryable (pausing after it, when pause is set).
// It returns the first other error, or a wrong checksum.
func checksumLoop(ctx context.Context, c *host.Client, b []byte, seed uint64, stop <-chan struct{}, ok func(), retryable *atomic.Int64, pause time.Duration) error {
	rng := rand.New(rand.NewPCG(seed, 3))
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		b := b[:rng.IntN(len(b))]
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		got, err := c.Checksum(ctx, b)
		switch {
		case err != nil && wire.IsRetryable(err):
			retryable.Add(1)
			time.Sleep(pause)
		case err != nil:
			return err
		case got != crc32.Checksum(b, castagnoli):
			return errors.New("wrong checksum")
		default:
			ok()
		}
	}
}
