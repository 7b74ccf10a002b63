package dpu

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/hecsys/hec/bpf"
)

// Defaults users can rely on; hecctl finds an agent on them with no flags.
const (
	DefaultShm        = "/dev/shm/hec0"
	DefaultTCP        = "127.0.0.1:7610"
	DefaultMgmt       = "127.0.0.1:7600"
	DefaultRESP       = "127.0.0.1:6380"
	DefaultUDP        = "127.0.0.1:11311"
	DefaultRegionSize = 64 << 20
)

// Config is the agent's configuration. The zero value of every field means
// its default, filled in by withDefaults; a TOML file (LoadConfigFile) and
// flags (cmd/hecd) set the same fields.
type Config struct {
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
	// RingEntries is the number of descriptors per ring. Default 256.
	RingEntries int `toml:"ring_entries"`
	// TCP is the address of the TCP handoff listener. Default
	// 127.0.0.1:7610; "off" disables it.
	TCP string `toml:"tcp"`
	// Mgmt is the management HTTP address. Default 127.0.0.1:7600; "off"
	// disables it.
	Mgmt string `toml:"mgmt"`
	// RESP is the Redis-protocol address of the kv service. Default
	// 127.0.0.1:6380. Not served by this build: reported as such.
	RESP string `toml:"resp"`
	// UDP is the address of the kv service's UDP GET path. Default
	// 127.0.0.1:11311. Not served by this build: reported as such.
	UDP string `toml:"udp"`
	// KVDurability is "sync" (default: a write is acknowledged once on
	// disk, concurrent writes sharing fsyncs) or "async" (acknowledged in
	// memory; a crash may lose the last writes).
	KVDurability string `toml:"kv_durability"`
	// DPUProfile makes an emulated agent behave like a DPU's Arm side:
	// "bf2", "bf3" or "none" (default). See Profile.
	DPUProfile string `toml:"dpu_profile"`
	// RESPPassword, when set, makes RESP clients AUTH first.
	RESPPassword string `toml:"resp_password"`
	// StateDir keeps what outlives a restart (the generation counter, later
	// the kv data). Default $XDG_STATE_HOME/hec or ~/.local/state/hec.
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

	// The peer layer (agents talking to agents). Served when Peer is an
	// address; NodeID and a cluster key are then required.
	//
	// NodeID is this agent's id in its cluster (1..).
	NodeID uint32 `toml:"node_id"`
	// Peer is the address other agents reach this one on. Default off.
	Peer string `toml:"peer"`
	// Peers is the static member list, "ID@HOST:PORT" each (this node may
	// be in it).
	Peers []string `toml:"peers"`
	// ClusterKeyFile holds the cluster key (at least 16 bytes) that
	// authenticates every peer connection.
	ClusterKeyFile string `toml:"cluster_key_file"`
	// Membership is "static" (default: Peers) or "etcd://HOST:PORT": the
	// agent registers under a lease and follows the member set there.
	Membership string `toml:"membership"`
	// Cluster names the cluster (the etcd key prefix). Default "hec".
	Cluster string `toml:"cluster"`
	// XDP names the interface the XDP fast path attaches to (counters,
	// allow-list, samples, hot GETs answered in the kernel). Default off.
	XDP string `toml:"xdp"`
	// XDPMode is auto (default: native, else generic), native or generic.
	XDPMode string `toml:"xdp_mode"`
	// XDPReplace lets the agent replace an XDP program it did not attach.
	XDPReplace bool `toml:"xdp_replace"`
	// XDPPinDir is where the counters, talkers and allow-list are pinned
	// (bpffs), so they outlive a restart. Default
	// /sys/fs/bpf/hec/nsINODE-IFACE; "off" pins nothing.
	XDPPinDir string `toml:"xdp_pin_dir"`
	// ACLDefault is what the allow-list does with sources it does not
	// name on the service ports: allow (default) or deny.
	ACLDefault string `toml:"acl_default"`
	// HotKeys bounds the keys whose UDP GETs XDP answers. Default 1024
	// (at most 4096); 0 turns hot GETs off.
	HotKeys *int `toml:"hot_keys"`
	// HotMaxValue is the largest value held for XDP. Default 512 bytes.
	HotMaxValue int `toml:"hot_max_value"`
	// HotMinRate is how many GETs per second reaching user space make a
	// key hot. Default 100.
	HotMinRate float64 `toml:"hot_min_rate"`

	// PeerDeadline declares dead a peer that owes work and has sent
	// nothing for this long. Default 2s.
	PeerDeadline Duration `toml:"peer_deadline"`
}

// Duration is a time.Duration that reads from TOML as "3s".
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	d.Duration = v
	return err
}

// Off is the value that disables a listener or the region.
const Off = "off"

// LoadConfigFile reads a TOML file into c, leaving fields the file does not
// name as they are. Unknown keys are an error: a typo must not be ignored.
func LoadConfigFile(path string, c *Config) error {
	md, err := toml.DecodeFile(path, c)
	if err != nil {
		return fmt.Errorf("read config %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return fmt.Errorf("read config %s: unknown keys %v", path, und)
	}
	return nil
}

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("dpu: bad configuration")

// withDefaults returns c with every zero field set to its default, and
// checks the result.
func (c Config) withDefaults() (Config, error) {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Shm, DefaultShm)
	def(&c.TCP, DefaultTCP)
	def(&c.Mgmt, DefaultMgmt)
	def(&c.RESP, DefaultRESP)
	def(&c.UDP, DefaultUDP)
	def(&c.Peer, Off)
	def(&c.Membership, "static")
	def(&c.Cluster, "hec")
	if c.PeerDeadline.Duration == 0 {
		c.PeerDeadline.Duration = 2 * time.Second
	}
	def(&c.XDP, Off)
	def(&c.XDPMode, "auto")
	def(&c.ACLDefault, "allow")
	if c.HotKeys == nil {
		n := 1024
		c.HotKeys = &n
	}
	if c.HotMaxValue == 0 {
		c.HotMaxValue = 512
	}
	if c.HotMinRate == 0 {
		c.HotMinRate = 100
	}
	if c.RegionSize == 0 {
		c.RegionSize = DefaultRegionSize
	}
	if c.QueuePairs == 0 {
		c.QueuePairs = 16
	}
	if c.RingEntries == 0 {
		c.RingEntries = 256
	}
	if c.LeaseTimeout.Duration == 0 {
		c.LeaseTimeout.Duration = 3 * time.Second
	}
	if c.CheckPIDs == nil {
		t := true
		c.CheckPIDs = &t
	}
	if c.Doorbell == nil {
		t := true
		c.Doorbell = &t
	}
	if c.MaxFrame == 0 {
		c.MaxFrame = 64 << 20
	}
	if c.StateDir == "" {
		base := os.Getenv("XDG_STATE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return c, fmt.Errorf("no state dir: set --state-dir (%v): %w", err, ErrConfig)
			}
			base = filepath.Join(home, ".local", "state")
		}
		c.StateDir = filepath.Join(base, "hec")
	}
	return c, c.validate()
}

func (c Config) validate() error {
	for name, addr := range map[string]string{"tcp": c.TCP, "mgmt": c.Mgmt, "resp": c.RESP, "udp": c.UDP} {
		if addr == Off {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("--%s %q: %v: %w", name, addr, err, ErrConfig)
		}
	}
	if c.KVDurability != "" && c.KVDurability != "sync" && c.KVDurability != "async" {
		return fmt.Errorf("kv_durability %q: want sync or async: %w", c.KVDurability, ErrConfig)
	}
	if c.Peer != Off {
		if _, _, err := net.SplitHostPort(c.Peer); err != nil {
			return fmt.Errorf("--peer %q: %v: %w", c.Peer, err, ErrConfig)
		}
		if c.NodeID == 0 || c.ClusterKeyFile == "" {
			return fmt.Errorf("the peer layer needs a node id and a cluster key file: %w", ErrConfig)
		}
	}
	if _, err := parsePeers(c.Peers); err != nil {
		return fmt.Errorf("%v: %w", err, ErrConfig)
	}
	if c.Membership != "static" && !strings.HasPrefix(c.Membership, "etcd://") {
		return fmt.Errorf("membership %q: want static or etcd://HOST:PORT: %w", c.Membership, ErrConfig)
	}
	if _, err := ParseProfile(c.DPUProfile); err != nil {
		return fmt.Errorf("%v: %w", err, ErrConfig)
	}
	if _, err := bpf.ParseMode(c.XDPMode); err != nil {
		return fmt.Errorf("%v: %w", err, ErrConfig)
	}
	if c.ACLDefault != "allow" && c.ACLDefault != "deny" {
		return fmt.Errorf("acl_default %q: want allow or deny: %w", c.ACLDefault, ErrConfig)
	}
	if *c.HotKeys < 0 || *c.HotKeys > bpf.HotSlots || c.HotMaxValue < 0 || c.HotMaxValue > bpf.HotBodyMax-HotReplyOverhead || c.HotMinRate < 0 {
		return fmt.Errorf("hot_keys %d (0..%d), hot_max_value %d (0..%d), hot_min_rate %g: %w", *c.HotKeys, bpf.HotSlots,
			c.HotMaxValue, bpf.HotBodyMax-HotReplyOverhead, c.HotMinRate, ErrConfig)
	}
	if c.QueuePairs < 1 || c.RingEntries < 2 || c.RingEntries&(c.RingEntries-1) != 0 {
		return fmt.Errorf("queue_pairs %d, ring_entries %d (a power of two): %w", c.QueuePairs, c.RingEntries, ErrConfig)
	}
	if c.Workers < 0 || c.MaxFrame < 0 || c.LeaseTimeout.Duration < 0 {
		return fmt.Errorf("negative workers, max_frame or lease_timeout: %w", ErrConfig)
	}
	return nil
}
