package host_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hecsys/hec/dpu"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/wire"
)

// startAgent runs an agent in this process for the examples; applications
// reach the hecd that runs on the DPU (or as a local emulation) instead.
func startAgent() (shm, tcp string, stop func()) { return startAgentWith(nil) }

// startAgentWith is startAgent with setup run on the agent before it
// serves (tests register ops of their own there).
func startAgentWith(setup func(*dpu.Agent)) (shm, tcp string, stop func()) {
	dir, _ := os.MkdirTemp("", "hec-example")
	shm = filepath.Join("/dev/shm", filepath.Base(dir))
	a, err := dpu.New(dpu.Config{Agent: dpu.AgentConfig{Shm: shm, RegionSize: 8 << 20, QueuePairs: 2, TCP: "127.0.0.1:0",
		Mgmt: dpu.Off, StateDir: dir}, RESP: dpu.RESPConfig{Addr: dpu.Off}, UDP: dpu.UDPConfig{Addr: dpu.Off}}, nil)
	if err != nil {
		panic(err)
	}
	if setup != nil {
		setup(a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	<-a.Ready()
	return shm, a.Addr("tcp"), func() { cancel(); <-done; os.Remove(shm); os.RemoveAll(dir) }
}

// A buffer from Alloc lives in the shared window: the agent reads it in
// place, without a copy.
func ExampleClient_Checksum() {
	shm, _, stop := startAgent()
	defer stop()
	ctx := context.Background()

	c, err := host.Dial(ctx, "shm://"+shm)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	buf, err := c.Alloc(9)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Free(buf)
	copy(buf, "123456789")
	crc, err := c.Checksum(ctx, buf)
	fmt.Printf("crc32c %08x %v\n", crc, err)
	// Output: crc32c e3069283 <nil>
}

// Ops are submitted in a batch and waited for one by one; the same code runs
// over TCP, where payloads travel inline.
func ExampleClient_GoBatch() {
	_, tcp, stop := startAgent()
	defer stop()
	ctx := context.Background()

	c, err := host.Dial(ctx, "tcp://"+tcp)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	calls, err := c.GoBatch(ctx, []host.Request{
		{Op: wire.OpPing, Arg0: 42},
		{Op: wire.OpChecksum, In: [][]byte{[]byte("123456789")}},
		{Op: 0x7777}, // not an op the agent serves
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, call := range calls {
		r, err := c.Wait(ctx, call)
		fmt.Printf("%s: %#x %v\n", call.Req.Op, r.Arg0, err)
	}
	// Output:
	// ping: 0x2a <nil>
	// checksum: 0xe3069283 <nil>
	// op(0x7777): 0x0 wire: op(0x7777): bad op
}
