package dpu

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/shared/api"
)

func TestConfigDefaults(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/tmp/xdg")
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	a := c.Agent
	if a.Shm != api.DefaultRegion || a.TCP != api.DefaultTCP || a.Mgmt != api.DefaultMgmt || c.RESP.Addr != api.DefaultRESP ||
		c.UDP.Addr != api.DefaultUDP || a.StateDir != "/tmp/xdg/hec" || a.RegionSize != 64<<20 || !*a.CheckPIDs ||
		a.LeaseTimeout.Duration != 3*time.Second || c.Peer.Addr != Off || c.XDP.Iface != Off || c.KV.Durability != "sync" {
		t.Fatalf("defaults: %+v", c)
	}
	if d := DefaultConfig(); d.Agent.Shm != api.DefaultRegion || *d.XDP.HotKeys != 1024 {
		t.Fatalf("DefaultConfig: %+v", d)
	}
}

func TestConfigFile(t *testing.T) {
	tests := []struct {
		name, body string
		check      func(Config) bool
		wantErr    bool
	}{
		{"override", "[agent]\ntcp = \"off\"\nqueue_pairs = 4\nlease_timeout = \"500ms\"\ncheck_pids = false\n[resp]\naddr = \"127.0.0.1:7000\"\n[kv]\ndurability = \"async\"\n",
			func(c Config) bool {
				return c.Agent.TCP == Off && c.Agent.QueuePairs == 4 && c.Agent.LeaseTimeout.Duration == 500*time.Millisecond &&
					!*c.Agent.CheckPIDs && c.RESP.Addr == "127.0.0.1:7000" && c.KV.Durability == "async"
			}, false},
		{"unknown key", "[agent]\ntpc = \"x\"\n", nil, true},
		{"unknown section", "[rsp]\naddr = \"x\"\n", nil, true},
		{"bad duration", "[agent]\nlease_timeout = \"soon\"\n", nil, true},
		{"bad address", "[agent]\nmgmt = \"nonsense\"\n", nil, true},
		{"ring not power of two", "[agent]\nring_entries = 100\n", nil, true},
		{"bad durability", "[kv]\ndurability = \"maybe\"\n", nil, true},
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
	if _, err := (Config{Agent: AgentConfig{QueuePairs: -1}}).withDefaults(); !errors.Is(err, ErrConfig) {
		t.Fatalf("negative queue pairs: %v", err)
	}
}

// TestParseArgs: defaults, then the file, then the flags given, which
// override the file; every error names its flag.
func TestParseArgs(t *testing.T) {
	file := filepath.Join(t.TempDir(), "hecd.toml")
	os.WriteFile(file, []byte("[agent]\nmgmt = \"127.0.0.1:9000\"\nqueue_pairs = 4\n[resp]\naddr = \"off\"\n"), 0o644)
	tests := []struct {
		name  string
		args  []string
		check func(*Config) bool
		err   string
	}{
		{"defaults", nil, func(c *Config) bool { return c.Agent.Mgmt == api.DefaultMgmt && c.RESP.Addr == api.DefaultRESP }, ""},
		{"flags", []string{"--resp", "off", "--hot-keys", "0", "--check-pids=false", "--peers", "1@a:1,2@b:2"},
			func(c *Config) bool {
				return c.RESP.Addr == Off && *c.XDP.HotKeys == 0 && !*c.Agent.CheckPIDs && len(c.Peer.Peers) == 2
			}, ""},
		{"file", []string{"--config", file}, func(c *Config) bool {
			return c.Agent.Mgmt == "127.0.0.1:9000" && c.Agent.QueuePairs == 4 && c.RESP.Addr == Off
		}, ""},
		{"flag over file", []string{"--queue-pairs", "8", "--config", file, "--resp", "127.0.0.1:1"}, func(c *Config) bool {
			return c.Agent.Mgmt == "127.0.0.1:9000" && c.Agent.QueuePairs == 8 && c.RESP.Addr == "127.0.0.1:1"
		}, ""},
		{"bad value", []string{"--queue-pairs", "many"}, nil, "queue-pairs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, fs, err := ParseArgs("hecd", tt.args, nil)
			fs.SetOutput(new(nopWriter))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one naming %q", err, tt.err)
				}
				return
			}
			if err != nil || !tt.check(c) {
				t.Fatalf("config %+v, err %v", c, err)
			}
		})
	}
	// Validation errors name the flag.
	for flagName, cfg := range map[string]Config{
		"--resp":                               {RESP: RESPConfig{Addr: "nonsense"}},
		"--durability":                         {KV: KVConfig{Durability: "maybe"}},
		"--xdp-mode":                           {XDP: XDPConfig{Mode: "fast"}},
		"--peer":                               {Peer: PeerConfig{Addr: "127.0.0.1:7700"}},
		"--peer-transport rdma without --peer": {Peer: PeerConfig{Transport: "rdma"}},
		"--dpu-profile":                        {Agent: AgentConfig{DPUProfile: "bf9"}},
	} {
		if _, err := cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), flagName) {
			t.Errorf("%s: %v", flagName, err)
		}
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// TestREADMEConfigParses: the example configuration in the README is one
// hecd accepts.
func TestREADMEConfigParses(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```toml\n")
	body, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("no ```toml block in the README")
	}
	path := filepath.Join(t.TempDir(), "hecd.toml")
	os.WriteFile(path, []byte(body), 0o644)
	var c Config
	if err := LoadConfigFile(path, &c); err != nil {
		t.Fatal(err)
	}
	if _, err := c.withDefaults(); err != nil {
		t.Fatal(err)
	}
	// Every key of every section is in the example.
	sections := reflect.TypeOf(Config{})
	for i := range sections.NumField() {
		sec := sections.Field(i)
		table := "[" + sec.Tag.Get("toml") + "]"
		_, rest, ok := strings.Cut(body, table)
		if !ok {
			t.Errorf("the README's example has no %s", table)
			continue
		}
		rest, _, _ = strings.Cut(rest, "\n[")
		for j := range sec.Type.NumField() {
			key := sec.Type.Field(j).Tag.Get("toml")
			if !strings.Contains(rest, "\n"+key+" = ") {
				t.Errorf("the README's example lacks %s %s", table, key)
			}
		}
	}
}
