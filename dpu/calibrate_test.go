package dpu

import (
	"testing"
	"time"
)

// TestCalibratesOnlyWithAHandoff: an agent that serves the handoff
// calibrates its rail soon after it is ready; one that serves none (a
// RESP server) never spends the core and the memory on it. On the code
// before, both calibrated.
func TestCalibratesOnlyWithAHandoff(t *testing.T) {
	for _, tt := range []struct {
		name string
		tcp  string
		want bool
	}{
		{"tcp handoff", "127.0.0.1:0", true},
		{"no handoff", Off, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := runAgent(t, Config{Agent: AgentConfig{Shm: Off, TCP: tt.tcp, Mgmt: Off, StateDir: t.TempDir()},
				RESP: RESPConfig{Addr: "127.0.0.1:0"}, UDP: UDPConfig{Addr: Off}})
			if got := a.Status().ServesHandoff(); got != tt.want {
				t.Fatalf("status says it serves the handoff: %v, want %v", got, tt.want)
			}
			// A calibration starts calibrationDelay after ready and
			// takes two calibrationTimes: wait for three times that.
			wait := 3 * (calibrationDelay + 2*calibrationTime)
			if tt.want {
				wait = 20 * time.Second
			}
			deadline := time.Now().Add(wait)
			for len(a.Rails()) == 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if got := len(a.Rails()) > 0; got != tt.want {
				t.Fatalf("calibrated rails after %v: %v, want %v", wait, got, tt.want)
			}
		})
	}
}
