package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hecsys/hec/dpu"
)

// runAgentHelper runs an agent in this process (HEC_E2E_HELPER=agent) with
// only RESP served, on HEC_E2E_RESP, state in HEC_E2E_STATE.
func runAgentHelper() int {
	a, err := dpu.New(dpu.Config{Agent: dpu.AgentConfig{Shm: dpu.Off, TCP: dpu.Off, Mgmt: dpu.Off, StateDir: os.Getenv("HEC_E2E_STATE")},
		UDP: dpu.UDPConfig{Addr: dpu.Off}, RESP: dpu.RESPConfig{Addr: os.Getenv("HEC_E2E_RESP")}, KV: dpu.KVConfig{Durability: "sync"}}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		return 1
	}
	if err := a.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		return 1
	}
	return 0
}

// TestKill9AgentLosesNothingAcknowledged: SIGKILL a local agent (sync
// durability) under a stream of RESP writes; after a restart on the same
// state every acknowledged write is there.
func TestKill9AgentLosesNothingAcknowledged(t *testing.T) {
	state := t.TempDir()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	start := func() *exec.Cmd {
		cmd := helperCmd(t, "agent", "HEC_E2E_RESP="+addr, "HEC_E2E_STATE="+state)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 200; i++ {
			if c, err := net.Dial("tcp", addr); err == nil {
				c.Close()
				return cmd
			}
			time.Sleep(25 * time.Millisecond)
		}
		cmd.Process.Kill()
		t.Fatal("agent did not listen")
		return nil
	}
	ctx := context.Background()
	total, lost := 0, 0
	for round := 0; round < 3; round++ {
		agent := start()
		var mu sync.Mutex
		acked := map[string]string{}
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
				defer c.Close()
				for i := 0; ; i++ {
					k := "r" + strconv.Itoa(round) + ":w" + strconv.Itoa(w) + ":" + strconv.Itoa(i)
					if err := c.Set(ctx, k, k, 0).Err(); err != nil {
						return
					}
					mu.Lock()
					acked[k] = k
					mu.Unlock()
				}
			}(w)
		}
		time.Sleep(time.Duration(200+round*150) * time.Millisecond)
		agent.Process.Signal(syscall.SIGKILL)
		agent.Wait()
		wg.Wait()
		agent = start()
		c := redis.NewClient(&redis.Options{Addr: addr})
		for k, v := range acked {
			if got, err := c.Get(ctx, k).Result(); err != nil || got != v {
				lost++
			}
		}
		c.Close()
		total += len(acked)
		agent.Process.Signal(syscall.SIGTERM)
		agent.Wait()
	}
	t.Logf("%d acknowledged writes over 3 kills, %d lost", total, lost)
	if total == 0 || lost != 0 {
		t.Fatalf("%d of %d acknowledged writes lost", lost, total)
	}
}
