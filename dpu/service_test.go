package dpu

import (
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hecsys/hec/test/testutil"
)

// broken is a listener whose Accept always fails with an error that is
// neither about resources nor one connection.
type broken struct{ net.Listener }

func (broken) Accept() (net.Conn, error) {
	return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EINVAL}
}

// TestListenerStoppedForGood: a service whose listener fails for good is
// reported stopped, with why, and the agent is not ready.
func TestListenerStoppedForGood(t *testing.T) {
	a := runAgent(t, Config{Agent: AgentConfig{Shm: Off, TCP: Off, Mgmt: Off, StateDir: t.TempDir()},
		RESP: RESPConfig{Addr: "127.0.0.1:0"}, UDP: UDPConfig{Addr: Off}})
	if err := a.isReady(); err != nil {
		t.Fatalf("not ready at start: %v", err)
	}
	// A second loop on the RESP service's env, over a broken listener.
	var env *Env
	for i, s := range a.services {
		if s.Name() == "resp" {
			env = a.envs[i]
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	loop := env.Serve(broken{ln}, func(net.Conn) {})
	defer loop.Close()
	testutil.WaitFor(t, 10*time.Second, "the listener reported stopped", func() bool { return a.isReady() != nil })
	row, _ := a.Status().Service("resp")
	if !strings.Contains(row.Stopped, "invalid argument") || !strings.Contains(a.isReady().Error(), "resp stopped serving") {
		t.Fatalf("status row %+v, readiness %v", row, a.isReady())
	}
	if n, _ := env.acceptRetries(); n == 0 {
		t.Fatal("the failed accepts were not counted")
	}
}
