package dpu

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/hecsys/hec/dpu/profile"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/sysinfo"
)

// Off is the value that disables a listener, the region or a service.
const Off = api.Off

// DefaultRegionSize is the region's size when none is configured.
const DefaultRegionSize = 64 << 20

// AgentConfig is the core's section ([agent] in a configuration file):
// the region, the handoff over TCP, the management API and the state.
// The zero value of every field means its default (withDefaults).
type AgentConfig struct {
	// Shm is the region file. Default /dev/shm/hec0; "off" disables the
	// shared-memory transport.
	Shm string `toml:"shm"`
	// RegionSize is the region's size in bytes. Default 64 MiB.
	RegionSize uint64 `toml:"region_size"`
	// MapExisting maps Shm whole as it is (an ivshmem BAR's resource file)
	// instead of creating and sizing a file; RegionSize is then ignored.
	MapExisting bool `toml:"map_existing"`
	// QueuePairs is the number of queue pairs (host processes served at
	// once over shared memory). Default 16.
	QueuePairs int `toml:"queue_pairs"`
	// RingEntries is the number of descriptors per ring, a power of two.
	// Default 256.
	RingEntries int `toml:"ring_entries"`
	// TCP is the address of the TCP handoff listener. Default
	// 127.0.0.1:7610; "off" disables it.
	TCP string `toml:"tcp"`
	// Mgmt is the management HTTP address. Default 127.0.0.1:7600; "off"
	// disables it.
	Mgmt string `toml:"mgmt"`
	// StateDir keeps what outlives a restart (the generation counter, the
	// kv data). Default $XDG_STATE_HOME/hec or ~/.local/state/hec.
	StateDir string `toml:"state_dir"`
	// LeaseTimeout fences a queue pair whose holder's heartbeat is older.
	// Default 3s.
	LeaseTimeout Duration `toml:"lease_timeout"`
	// CheckPIDs fences a queue pair whose holder's pid is gone. Default
	// true: in local emulation the agent shares the hosts' pid namespace.
	// Set it false when the agent runs in a VM or on a DPU.
	CheckPIDs *bool `toml:"check_pids"`
	// Doorbell lets the idle agent sleep in the kernel until a host rings
	// (a futex in the region). Default true: in local emulation the hosts
	// share the agent's kernel. Across a VM boundary a host cannot wake
	// the agent; set it false there and the agent polls with short sleeps.
	Doorbell *bool `toml:"doorbell"`
	// Workers is the number of goroutines running handlers that are not
	// inline. Default GOMAXPROCS.
	Workers int `toml:"workers"`
	// MaxFrame bounds one TCP frame's payload. Default 64 MiB.
	MaxFrame int `toml:"max_frame"`
	// DPUProfile makes an emulated agent behave like a DPU's Arm side:
	// "bf2", "bf3" or "none" (default). See package profile.
	DPUProfile string `toml:"dpu_profile"`
	// TokenFile holds the operator's bearer token; created with a fresh
	// one when missing. With a token the management API, the TCP handoff
	// and (unless it has its own password) RESP require it. Default none.
	TokenFile string `toml:"token_file"`
	// MgmtOpen lists read-only management routes served without the
	// token: "healthz" (/healthz, /readyz) and "metrics" (/metrics),
	// comma-separated. Default none.
	MgmtOpen string `toml:"mgmt_open"`
	// MgmtCert and MgmtKey (PEM files) make the management API serve
	// HTTPS with this certificate. MgmtClientCA (PEM) then admits clients
	// whose certificate it signed, as the token does (mutual TLS); a
	// certificate from another CA fails the TLS handshake.
	MgmtCert     string `toml:"mgmt_cert"`
	MgmtKey      string `toml:"mgmt_key"`
	MgmtClientCA string `toml:"mgmt_client_ca"`
	// Insecure lets a listener bound beyond loopback (management, TCP
	// handoff, RESP) serve without credentials. Logged at every start
	// and reported in /v1/status.
	Insecure bool `toml:"insecure"`
	// TestHooks serves POST /v1/debug/fatal, which kills the agent with a
	// Go fatal error, and /v1/debug/store-panic, which makes the store's
	// committer panic at the next write (tests of the supervisor). Never
	// set it in production.
	TestHooks bool `toml:"test_hooks"`
}

func (c *AgentConfig) withDefaults() error {
	defString(&c.Shm, api.DefaultRegion)
	defString(&c.TCP, api.DefaultTCP)
	defString(&c.Mgmt, api.DefaultMgmt)
	if c.RegionSize == 0 {
		c.RegionSize = DefaultRegionSize
	}
	defInt(&c.QueuePairs, 16)
	defInt(&c.RingEntries, 256)
	defDuration(&c.LeaseTimeout, 3*time.Second)
	defBool(&c.CheckPIDs, true)
	defBool(&c.Doorbell, true)
	defInt(&c.MaxFrame, 64<<20)
	defString(&c.DPUProfile, "none")
	if c.StateDir == "" {
		dir, err := sysinfo.StateDir()
		if err != nil {
			return fmt.Errorf("--state-dir: no default (%v): %w", err, ErrConfig)
		}
		c.StateDir = dir
	}
	return nil
}

func (c *AgentConfig) validate() error {
	if err := checkAddr("tcp", c.TCP); err != nil {
		return err
	}
	if err := checkAddr("mgmt", c.Mgmt); err != nil {
		return err
	}
	if c.QueuePairs < 1 {
		return fmt.Errorf("--queue-pairs %d: want at least 1: %w", c.QueuePairs, ErrConfig)
	}
	if c.RingEntries < 2 || c.RingEntries&(c.RingEntries-1) != 0 {
		return fmt.Errorf("--ring-entries %d: want a power of two: %w", c.RingEntries, ErrConfig)
	}
	if c.Workers < 0 {
		return fmt.Errorf("--workers %d: negative: %w", c.Workers, ErrConfig)
	}
	if c.MaxFrame < 0 {
		return fmt.Errorf("--max-frame %d: negative: %w", c.MaxFrame, ErrConfig)
	}
	if _, err := profile.Parse(c.DPUProfile); err != nil {
		return fmt.Errorf("--dpu-profile: %v: %w", err, ErrConfig)
	}
	if (c.MgmtCert == "") != (c.MgmtKey == "") {
		return fmt.Errorf("--mgmt-cert and --mgmt-key go together: %w", ErrConfig)
	}
	if c.MgmtClientCA != "" && c.MgmtCert == "" {
		return fmt.Errorf("--mgmt-client-ca needs --mgmt-cert and --mgmt-key (mutual TLS is TLS first): %w", ErrConfig)
	}
	for _, name := range c.mgmtOpen() {
		if openRoutes[name] == nil {
			return fmt.Errorf("--mgmt-open %q: want healthz or metrics (comma-separated): %w", name, ErrConfig)
		}
	}
	if c.LeaseTimeout.Duration < 0 {
		return fmt.Errorf("--lease-timeout %v: negative: %w", c.LeaseTimeout, ErrConfig)
	}
	return nil
}

func (c *AgentConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Shm, "shm", c.Shm, "shared-memory region file, or off")
	fs.Uint64Var(&c.RegionSize, "region-size", c.RegionSize, "region size in bytes")
	fs.BoolVar(&c.MapExisting, "map-existing", c.MapExisting, "map the region file whole as it is (an ivshmem BAR) instead of sizing it")
	fs.IntVar(&c.QueuePairs, "queue-pairs", c.QueuePairs, "queue pairs in the region")
	fs.IntVar(&c.RingEntries, "ring-entries", c.RingEntries, "descriptors per ring (power of two)")
	fs.StringVar(&c.TCP, "tcp", c.TCP, "TCP handoff listener address, or off")
	fs.StringVar(&c.Mgmt, "mgmt", c.Mgmt, "management HTTP address, or off")
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "state directory")
	fs.Var(&c.LeaseTimeout, "lease-timeout", "fence a queue pair whose holder's heartbeat is older than this")
	fs.Var(boolPtr{&c.CheckPIDs}, "check-pids", "fence queue pairs whose holder pid is gone (local emulation only)")
	fs.Var(boolPtr{&c.Doorbell}, "doorbell", "sleep on a futex doorbell hosts ring when idle (hosts share this kernel)")
	fs.IntVar(&c.Workers, "workers", c.Workers, "handler worker goroutines (0: GOMAXPROCS)")
	fs.IntVar(&c.MaxFrame, "max-frame", c.MaxFrame, "largest TCP frame payload in bytes")
	fs.StringVar(&c.DPUProfile, "dpu-profile", c.DPUProfile, "behave like a DPU's Arm side: bf2, bf3 or none (own cores, CPU quota, no AVX)")
	fs.StringVar(&c.TokenFile, "token-file", c.TokenFile, "the operator's bearer token (created when missing): required by mgmt, the TCP handoff and RESP")
	fs.StringVar(&c.MgmtOpen, "mgmt-open", c.MgmtOpen, "read-only mgmt routes served without the token: healthz, metrics (comma-separated)")
	fs.StringVar(&c.MgmtCert, "mgmt-cert", c.MgmtCert, "serve the management API over HTTPS with this certificate (PEM)")
	fs.StringVar(&c.MgmtKey, "mgmt-key", c.MgmtKey, "the private key of --mgmt-cert (PEM)")
	fs.StringVar(&c.MgmtClientCA, "mgmt-client-ca", c.MgmtClientCA, "admit management clients with a certificate this CA signed (PEM; mutual TLS)")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "let listeners bound beyond loopback serve without credentials")
	fs.BoolVar(&c.TestHooks, "test-hooks", c.TestHooks, "serve POST /v1/debug/fatal and /v1/debug/store-panic (tests of the supervisor only)")
}

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("dpu: bad configuration")

// section is one part of Config: its defaults, its checks and its flags,
// bound straight to its fields (one edit adds a setting).
type section interface {
	withDefaults() error
	validate() error
	flags(fs *flag.FlagSet)
}

// withDefaults returns c with every zero field set to its default, and
// checks the result.
func (c Config) withDefaults() (Config, error) {
	for _, s := range c.sections() {
		if err := s.withDefaults(); err != nil {
			return c, err
		}
	}
	for _, s := range c.sections() {
		if err := s.validate(); err != nil {
			return c, err
		}
	}
	return c, nil
}

// DefaultConfig returns the configuration with every default filled in
// (what hecd with no flags runs).
func DefaultConfig() Config {
	var c Config
	for _, s := range c.sections() {
		s.withDefaults()
	}
	return c
}

// RegisterFlags binds hecd's flags to c's fields; a flag's default is the
// field's value at the time.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	for _, s := range c.sections() {
		s.flags(fs)
	}
}

// LoadConfigFile reads a TOML file into c, leaving fields the file does not
// name as they are: [agent] for the core, a section per service. Unknown
// keys are an error: a typo must not be ignored.
func LoadConfigFile(path string, c *Config) error {
	md, err := toml.DecodeFile(path, c)
	if err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return fmt.Errorf("--config %s: unknown keys %v", path, und)
	}
	return nil
}

// ParseArgs is hecd's configuration path: defaults, then the TOML file
// named by --config (if any), then the flags given, which override the
// file. The flag set it returns stays bound to the returned Config's
// fields (FlagSet.Set changes them); extra registers the caller's flags
// that are not configuration.
func ParseArgs(name string, args []string, extra func(fs *flag.FlagSet)) (*Config, *flag.FlagSet, error) {
	parse := func(c *Config) (*flag.FlagSet, string, error) {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		fs.SetOutput(io.Discard) // the caller reports the error, in one line
		file := fs.String("config", "", "TOML configuration file ([agent] and a section per service; flags override it)")
		c.RegisterFlags(fs)
		if extra != nil {
			extra(fs)
		}
		err := fs.Parse(args)
		return fs, *file, err
	}
	c := DefaultConfig()
	fs, file, err := parse(&c)
	if err != nil || file == "" {
		return &c, fs, err
	}
	fromFile := DefaultConfig()
	if err := LoadConfigFile(file, &fromFile); err != nil {
		return &c, fs, err
	}
	fs, _, err = parse(&fromFile)
	return &fromFile, fs, err
}

// Duration is a time.Duration that reads from TOML and flags as "3s".
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration.
func (d *Duration) UnmarshalText(b []byte) error { return d.Set(string(b)) }

// Set parses a Go duration (flag.Value).
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// boolPtr binds a flag to a *bool field whose nil means its default.
type boolPtr struct{ p **bool }

func (b boolPtr) String() string {
	if b.p == nil || *b.p == nil {
		return ""
	}
	return strconv.FormatBool(**b.p)
}

func (b boolPtr) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b.p = &v
	return nil
}

func (b boolPtr) IsBoolFlag() bool { return true }

// intPtr binds a flag to an *int field whose nil means its default.
type intPtr struct{ p **int }

func (n intPtr) String() string {
	if n.p == nil || *n.p == nil {
		return ""
	}
	return strconv.Itoa(**n.p)
}

func (n intPtr) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil {
		return err
	}
	*n.p = &v
	return nil
}

// listFlag binds a flag to a []string field: one comma-separated value.
type listFlag struct{ p *[]string }

func (l listFlag) String() string {
	if l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

func (l listFlag) Set(s string) error {
	*l.p = nil
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l.p = append(*l.p, v)
		}
	}
	return nil
}

func defString(s *string, v string) {
	if *s == "" {
		*s = v
	}
}

func defInt(n *int, v int) {
	if *n == 0 {
		*n = v
	}
}

func defBool(b **bool, v bool) {
	if *b == nil {
		*b = &v
	}
}

func defDuration(d *Duration, v time.Duration) {
	if d.Duration == 0 {
		d.Duration = v
	}
}

// checkAddr checks a listener address (HOST:PORT, or off) given by --flag.
func checkAddr(flag, addr string) error {
	if addr == Off {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--%s %q: %v: %w", flag, addr, err, ErrConfig)
	}
	return nil
}

// mgmtOpen returns the names in MgmtOpen.
func (c *AgentConfig) mgmtOpen() []string {
	var out []string
	for _, f := range strings.Split(c.MgmtOpen, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
