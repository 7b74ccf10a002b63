package profile

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/hecsys/hec/shared/affinity"
	"github.com/hecsys/hec/shared/api"

	"golang.org/x/sys/unix"
)

// A Profile makes the emulated agent behave like a DPU's Arm side, so rail
// measurements on a machine without a DPU mean something: the agent gets
// cores of its own, a CPU quota standing for the Arm cores' lower speed,
// and no x86 vector extensions the Arm cores lack.
type Profile struct {
	Name  string `json:"name"`  // bf2, bf3 or none
	Cores int    `json:"cores"` // Arm cores of the real DPU
	Core  string `json:"core"`  // their kind
	// CoreSpeed is one Arm core's speed relative to one host core. It is a
	// model choice, not a measurement: the quota grants the agent
	// CoreSpeed of each core it gets.
	CoreSpeed float64 `json:"core_speed"`
	// GODEBUG switches off these CPU features in the agent (Go's crypto,
	// hash and runtime kernels then take their SSE paths, like NEON's
	// 128-bit ones).
	GODEBUGOff []string `json:"godebug_off,omitempty"`
}

// Profiles are the DPU profiles hecd --dpu-profile knows.
var Profiles = map[string]Profile{
	"none": {Name: "none"},
	"bf2": {Name: "bf2", Cores: 8, Core: "Cortex-A72", CoreSpeed: 0.4,
		GODEBUGOff: []string{"avx", "avx2", "avx512f", "fma"}},
	"bf3": {Name: "bf3", Cores: 16, Core: "Cortex-A78AE", CoreSpeed: 0.7,
		GODEBUGOff: []string{"avx", "avx2", "avx512f", "fma"}},
}

// ProfileEnv names the profile whose GODEBUG a re-executed hecd runs with.
const ProfileEnv = "HEC_DPU_PROFILE_EXEC"

// Parse returns the profile called name ("" is none).
func Parse(name string) (Profile, error) {
	if name == "" {
		name = "none"
	}
	p, ok := Profiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("dpu profile %q: want bf2, bf3 or none", name)
	}
	return p, nil
}

// Reexec runs this program again with the profile's GODEBUG (CPU features
// are read once, at start) unless it already runs with it. It returns only
// when nothing needs doing, or on error. Call it first thing in main.
func (p Profile) Reexec() error {
	if len(p.GODEBUGOff) == 0 || os.Getenv(ProfileEnv) == p.Name {
		return nil
	}
	var opts []string
	for _, f := range p.GODEBUGOff {
		opts = append(opts, "cpu."+f+"=off")
	}
	env := os.Environ()
	gd := strings.Join(opts, ",")
	found := false
	for i, e := range env {
		if v, ok := strings.CutPrefix(e, "GODEBUG="); ok {
			env[i], found = "GODEBUG="+v+","+gd, true
		}
	}
	if !found {
		env = append(env, "GODEBUG="+gd)
	}
	env = append(env, ProfileEnv+"="+p.Name)
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("dpu profile: %w", err)
	}
	return fmt.Errorf("dpu profile: re-exec with GODEBUG: %w", unix.Exec(exe, os.Args, env))
}

// Applied is what applying a profile did, for /v1/status and the log.
type Applied struct {
	Profile    Profile `json:"profile"`
	CPUs       []int   `json:"cpus,omitempty"` // the cores the agent is pinned to
	GOMAXPROCS int     `json:"gomaxprocs"`
	// Quota is the CPU the agent may use, in cores (0: none set), and
	// QuotaNote why it is not set where it should be.
	Quota     float64 `json:"quota_cores"`
	QuotaNote string  `json:"quota_note,omitempty"`
	SIMDOff   bool    `json:"simd_off"` // running with the profile's GODEBUG
	cgroupDir string
}

// quotaPeriodMicros is the CFS period of the quota: short, so a job of a
// few milliseconds is slowed evenly rather than run at full speed and then
// stopped for most of a long period.
const quotaPeriodMicros = 10000

// Apply pins the agent to the last cores it may use (at most half of them,
// so the host keeps the rest), sets GOMAXPROCS to match, and caps the
// process with a CFS quota in a cgroup of its own. What the machine does
// not allow (no cgroup cpu controller, not root) is reported in Applied,
// not faked. Release undoes the cgroup.
func (p Profile) Apply() (Applied, error) {
	a := Applied{Profile: p, GOMAXPROCS: runtime.GOMAXPROCS(0), SIMDOff: len(p.GODEBUGOff) > 0 && os.Getenv(ProfileEnv) == p.Name}
	if p.Name == "none" {
		return a, nil
	}
	allowed, err := affinity.Allowed()
	if err != nil {
		return a, fmt.Errorf("dpu profile: %w", err)
	}
	n := min(p.Cores, max(1, len(allowed)/2))
	a.CPUs = allowed[len(allowed)-n:]
	if err := affinity.PinProcess(a.CPUs); err != nil {
		return a, fmt.Errorf("dpu profile: %w", err)
	}
	runtime.GOMAXPROCS(n)
	a.GOMAXPROCS = n
	quota := float64(n) * p.CoreSpeed
	dir, err := cpuQuota(quota)
	if err != nil {
		a.QuotaNote = "quota not applied: " + err.Error()
		return a, nil
	}
	a.Quota, a.cgroupDir = quota, dir
	return a, nil
}

// Release moves the agent back to its original cgroup and removes its own.
func (a Applied) Release() {
	if a.cgroupDir == "" {
		return
	}
	parent := filepath.Dir(a.cgroupDir)
	os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
	os.Remove(a.cgroupDir)
}

// cpuQuota puts this process in a new cgroup capped at cores CPUs: cgroup
// v2 (cpu.max) where the cpu controller is there, else v1 (cfs_quota_us).
// Stale groups of agents that died are removed first.
func cpuQuota(cores float64) (string, error) {
	quota := int(cores * quotaPeriodMicros)
	root, v2, err := cpuCgroupRoot()
	if err != nil {
		return "", err
	}
	if old, _ := filepath.Glob(filepath.Join(root, "hec-agent-*")); len(old) > 0 {
		for _, d := range old {
			os.Remove(d) // fails while a live agent is in it
		}
	}
	dir := filepath.Join(root, fmt.Sprintf("hec-agent-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return "", fmt.Errorf("make cgroup: %w", err)
	}
	var werr error
	if v2 {
		werr = os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(fmt.Sprintf("%d %d", quota, quotaPeriodMicros)), 0)
	} else {
		werr = errors.Join(os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(quotaPeriodMicros)), 0),
			os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(strconv.Itoa(quota)), 0))
	}
	if werr == nil {
		werr = os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
	}
	if werr != nil {
		os.Remove(dir)
		return "", fmt.Errorf("set quota: %w", werr)
	}
	return dir, nil
}

// cpuCgroupRoot finds where the cpu controller is mounted.
func cpuCgroupRoot() (string, bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	var v2 string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(fields) {
			continue
		}
		mnt, fstype, opts := fields[4], fields[sep+1], fields[sep+3]
		switch fstype {
		case "cgroup":
			for _, o := range strings.Split(opts, ",") {
				if o == "cpu" {
					return mnt, false, nil
				}
			}
		case "cgroup2":
			if b, err := os.ReadFile(filepath.Join(mnt, "cgroup.subtree_control")); err == nil && slices.Contains(strings.Fields(string(b)), "cpu") {
				v2 = mnt
			}
		}
	}
	if v2 != "" {
		return v2, true, nil
	}
	return "", false, errors.New("no cgroup cpu controller mounted")
}

// Status is what /v1/status reports of the applied profile.
func (a Applied) Status() *api.Profile {
	p := a.Profile
	return &api.Profile{Name: p.Name, Cores: p.Cores, Core: p.Core, CoreSpeed: p.CoreSpeed, GODEBUGOff: p.GODEBUGOff,
		CPUs: a.CPUs, GOMAXPROCS: a.GOMAXPROCS, Quota: a.Quota, QuotaNote: a.QuotaNote, SIMDOff: a.SIMDOff}
}
