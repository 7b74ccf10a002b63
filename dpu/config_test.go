package dpu

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/tmp/xdg")
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Shm != DefaultShm || c.TCP != DefaultTCP || c.Mgmt != DefaultMgmt || c.RESP != DefaultRESP ||
		c.UDP != DefaultUDP || c.StateDir != "/tmp/xdg/hec" || c.RegionSize != 64<<20 || !*c.CheckPIDs ||
		c.LeaseTimeout.Duration != 3*time.Second {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestConfigFile(t *testing.T) {
	tests := []struct {
		name, body string
		check      func(Config) bool
		wantErr    bool
	}{
		{"override", "tcp = \"off\"\nqueue_pairs = 4\nlease_timeout = \"500ms\"\ncheck_pids = false\n",
			func(c Config) bool {
				return c.TCP == Off && c.QueuePairs == 4 && c.LeaseTimeout.Duration == 500*time.Millisecond && !*c.CheckPIDs
			}, false},
		{"unknown key", "tpc = \"x\"\n", nil, true},
		{"bad duration", "lease_timeout = \"soon\"\n", nil, true},
		{"bad address", "mgmt = \"nonsense\"\n", nil, true},
		{"ring not power of two", "ring_entries = 100\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "hecd.toml")
			os.WriteFile(path, []byte(tt.body), 0o644)
			var c Config
			err := LoadConfigFile(path, &c)
			if err == nil {
				c, err = c.withDefaults()
			}
			if tt.wantErr {
				if err == nil {
					t.Fatal("accepted")
				}
				return
			}
			if err != nil || !tt.check(c) {
				t.Fatalf("config %+v, err %v", c, err)
			}
		})
	}
	if _, err := (Config{QueuePairs: -1}).withDefaults(); !errors.Is(err, ErrConfig) {
		t.Fatalf("negative queue pairs: %v", err)
	}
}
