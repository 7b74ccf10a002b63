package api

import (
	"time"

	"github.com/hecsys/hec/shared/sysinfo"
)

// Status is the body of GET /v1/status.
type Status struct {
	Version    string    `json:"version"`
	PID        int       `json:"pid"`
	Started    time.Time `json:"started"`
	UptimeSec  float64   `json:"uptime_seconds"`
	Generation uint32    `json:"generation"`
	Ready      bool      `json:"ready"`
	// Region is the shared-memory region served ("" when off), its size
	// and the window each queue pair gets.
	Region     string `json:"region,omitempty"`
	RegionSize uint64 `json:"region_size,omitempty"`
	WindowSize uint64 `json:"window_size,omitempty"`
	StateDir   string `json:"state_dir"`
	// Services lists every configured service and transport and whether
	// it is served.
	Services   []Service   `json:"services"`
	QueuePairs []QueuePair `json:"queue_pairs"`
	Ops        []OpCount   `json:"ops"`
	// Platform is what the agent runs on; Profile the DPU profile applied
	// (nil: none); Rails the agent's own rates, calibrated in the
	// background after it is ready (empty until the first calibration,
	// and for an agent without a handoff transport: no host plans a
	// split with it).
	Platform *Platform `json:"platform,omitempty"`
	Profile  *Profile  `json:"dpu_profile,omitempty"`
	Rails    []Rail    `json:"rails"`
	// NodeID and Peers: the peer layer, when served.
	NodeID uint32       `json:"node_id,omitempty"`
	Peers  []PeerStatus `json:"peers,omitempty"`
	// Access is who may talk to the agent.
	Access Access `json:"access"`
	// EC is the erasure-coding service (nil when not served).
	EC *ECStatus `json:"ec,omitempty"`
	// Update is the A/B slots and the latest update (nil when the agent
	// was not started by a loader that keeps slots).
	Update *UpdateStatus `json:"update,omitempty"`
	// RDMA is what the agent's machine offers for RDMA (nil from an
	// agent that does not say).
	RDMA *RDMAStatus `json:"rdma,omitempty"`
}

// RDMAStatus is the agent's RDMA devices and its RDMA rail.
type RDMAStatus struct {
	Devices []sysinfo.RDMADevice `json:"devices"`
	// Summary says in a line what the devices are (none: why).
	Summary string `json:"summary"`
	// Rail is "absent: WHY" while the agent cannot carry the handoff or
	// its peer links over RDMA.
	Rail string `json:"rail"`
	// Errors are the soft-RoCE links asked for (hecd --rdma-rxe) that
	// could not be made, each with why.
	Errors []string `json:"errors,omitempty"`
}

// ServesHandoff says whether the agent serves the handoff: its region, or
// the TCP transport.
func (st Status) ServesHandoff() bool {
	for _, sv := range st.Services {
		if sv.Name == "tcp" && sv.Served {
			return true
		}
	}
	return st.Region != ""
}

// UpdateStatus is the loader's record as the agent read it: the slot
// running ("a", "b" or "base": the loader's own binary), the committed
// one, the versions installed, the anti-rollback floor, and what became
// of the latest update.
type UpdateStatus struct {
	Slot      string            `json:"slot"`
	Committed string            `json:"committed"`
	Tries     int               `json:"tries"`
	Versions  map[string]string `json:"versions,omitempty"`
	// Targets are the slots' bundle kinds (agent, or qemu: a machine
	// bundle); Machine, when set, is the committed machine slot, whose
	// kernel and initramfs the machine boots.
	Targets map[string]string `json:"targets,omitempty"`
	Machine string            `json:"machine,omitempty"`
	Floor   string            `json:"floor,omitempty"`
	Last    *UpdateOutcome    `json:"last,omitempty"`
}

// Results of an update, in UpdateOutcome.Result.
const (
	UpdateTrying     = "trying"
	UpdateCommitted  = "committed"
	UpdateRolledBack = "rolled back"
)

// UpdateOutcome is an update's fate: Result is UpdateTrying,
// UpdateCommitted or UpdateRolledBack (Reason says why).
type UpdateOutcome struct {
	Version string    `json:"version"`
	From    string    `json:"from"`
	Slot    string    `json:"slot"`
	Result  string    `json:"result"`
	Reason  string    `json:"reason,omitempty"`
	At      time.Time `json:"at"`
}

// UpdateReply answers POST /v1/update: the bundle's version, the version
// running, the slot written (or that would be, on a dry run) and the
// result ("verified" on a dry run, else "trying": the agent restarts into
// it).
type UpdateReply struct {
	Version string `json:"version"`
	From    string `json:"from"`
	Slot    string `json:"slot"`
	Arch    string `json:"arch"`
	DryRun  bool   `json:"dry_run"`
	Result  string `json:"result"`
}

// ECStatus is the agent's erasure coder: the vector path its kernels take
// (gfni-avx512, avx2, ssse3, neon, sve, generic, …) and the bytes it has
// coded: data encoded, shards rebuilt.
type ECStatus struct {
	SIMD         string `json:"simd"`
	EncodedBytes uint64 `json:"encoded_bytes"`
	RebuiltBytes uint64 `json:"rebuilt_bytes"`
}

// Access is how the agent admits clients: Token when the operator's
// bearer token is required (management API, TCP handoff, RESP without a
// password of its own), kept in TokenFile; MgmtOpen, the read-only
// management routes served without it; Insecure, the listeners served
// beyond loopback without credentials because the operator said so.
type Access struct {
	Token     bool   `json:"token"`
	TokenFile string `json:"token_file,omitempty"`
	// MgmtTLS: the management API serves HTTPS; MgmtClientCerts: a
	// client certificate from its CA admits, as the token does.
	MgmtTLS         bool     `json:"mgmt_tls,omitempty"`
	MgmtClientCerts bool     `json:"mgmt_client_certs,omitempty"`
	MgmtOpen        []string `json:"mgmt_open,omitempty"`
	Insecure        []string `json:"insecure,omitempty"`
}

// Service is one configured service or transport: where it listens and
// whether it is served. Stopped says why a listener stopped serving for
// good after start (the agent is then not ready).
type Service struct {
	Name    string `json:"name"`
	Addr    string `json:"addr"`
	Served  bool   `json:"served"`
	Note    string `json:"note,omitempty"`
	Stopped string `json:"stopped,omitempty"`
}

// Service looks a service up by name.
func (s Status) Service(name string) (Service, bool) {
	for _, v := range s.Services {
		if v.Name == name {
			return v, true
		}
	}
	return Service{}, false
}

// QueuePair is one queue pair of the region.
type QueuePair struct {
	Index      int    `json:"index"`
	State      string `json:"state"`
	PID        uint32 `json:"pid,omitempty"`
	StartTicks uint64 `json:"start_ticks,omitempty"`
	Reason     string `json:"reason,omitempty"`
	InFlight   uint64 `json:"in_flight"`
	Faults     uint64 `json:"faults"`
	Fences     uint64 `json:"fences"`
	// Repairs counts the times the region's state word for this pair
	// differed from the agent's view (something wrote it) and the agent
	// wrote it again; RegionShowed is what the region said the last time.
	Repairs      uint64 `json:"repairs,omitempty"`
	RegionShowed string `json:"region_showed,omitempty"`
}

// OpCount is one op's counters; op "rejected" counts descriptors that
// failed validation or named no served op.
type OpCount struct {
	Op     string `json:"op"`
	Count  uint64 `json:"count"`
	Errors uint64 `json:"errors"`
}

// Platform is what the agent runs on.
type Platform struct {
	// Generation is BlueField-2, BlueField-3 or BlueField when the agent
	// runs on a DPU's Arm cores, "emulated" anywhere else.
	Generation  string        `json:"generation"`
	Model       string        `json:"model,omitempty"` // DMI product or device-tree model
	CPU         sysinfo.CPU   `json:"cpu"`
	MemoryBytes int64         `json:"memory_bytes"`
	NICs        []sysinfo.NIC `json:"nics"`
}

// Profile is the DPU profile an emulated agent applied to itself.
type Profile struct {
	Name      string  `json:"name"`       // bf2, bf3 or none
	Cores     int     `json:"cores"`      // Arm cores of the real DPU
	Core      string  `json:"core"`       // their kind
	CoreSpeed float64 `json:"core_speed"` // one Arm core against one host core (a model choice)
	// GODEBUGOff lists the CPU features switched off in the agent.
	GODEBUGOff []string `json:"godebug_off,omitempty"`
	// CPUs are the cores the agent is pinned to, GOMAXPROCS its Go
	// threads; Quota the CPU it may use in cores (0: none set), and
	// QuotaNote why it is not set where it should be.
	CPUs       []int   `json:"cpus,omitempty"`
	GOMAXPROCS int     `json:"gomaxprocs"`
	Quota      float64 `json:"quota_cores"`
	QuotaNote  string  `json:"quota_note,omitempty"`
	SIMDOff    bool    `json:"simd_off"` // running with the profile's GODEBUG
}

// Rail is what one of the agent's rails was measured to do, and when.
type Rail struct {
	Rail       string    `json:"rail"`
	Kind       string    `json:"kind"`
	Cores      int       `json:"cores"`
	CopyRate   float64   `json:"copy_bytes_per_second"`
	CRC32CRate float64   `json:"crc32c_bytes_per_second"`
	MeasuredAt time.Time `json:"measured_at"`
	AgeSeconds float64   `json:"age_seconds"`
}
