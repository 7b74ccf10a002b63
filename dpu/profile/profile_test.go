package profile

import (
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in   string
		ok   bool
		name string
	}{{"", true, "none"}, {"none", true, "none"}, {"bf2", true, "bf2"}, {"bf3", true, "bf3"}, {"bf4", false, ""}} {
		p, err := Parse(tt.in)
		if (err == nil) != tt.ok || p.Name != tt.name {
			t.Errorf("Parse(%q) = %+v, %v", tt.in, p, err)
		}
	}
}

type profileReport struct {
	Applied  Applied
	GODEBUG  string
	Cgroup   string
	Released bool
	Affinity []int
}

// The helper half of TestProfileApply, run in a process of its own: the
// profile re-executes it, pins it and caps it.
func TestProfileApplyHelper(t *testing.T) {
	if os.Getenv("HEC_PROFILE_HELPER") == "" {
		t.Skip("helper process of TestProfileApply")
	}
	p, _ := Parse("bf2")
	if err := p.Reexec(); err != nil {
		t.Fatal(err)
	}
	a, err := p.Apply()
	if err != nil {
		t.Fatal(err)
	}
	r := profileReport{Applied: a, GODEBUG: os.Getenv("GODEBUG")}
	var set unix.CPUSet
	unix.SchedGetaffinity(0, &set)
	for c := 0; c < 1024; c++ {
		if set.IsSet(c) {
			r.Affinity = append(r.Affinity, c)
		}
	}
	b, _ := os.ReadFile("/proc/self/cgroup")
	r.Cgroup = string(b)
	a.Release()
	if a.cgroupDir != "" {
		_, err := os.Stat(a.cgroupDir)
		r.Released = os.IsNotExist(err)
	}
	j, _ := json.Marshal(r)
	os.Stdout.WriteString("\nPROFILE " + string(j) + "\n")
}

func TestProfileApply(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("a profile pins the agent to half the cores: needs two")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestProfileApplyHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "HEC_PROFILE_HELPER=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var r profileReport
	for _, l := range strings.Split(string(out), "\n") {
		if j, ok := strings.CutPrefix(l, "PROFILE "); ok {
			if err := json.Unmarshal([]byte(j), &r); err != nil {
				t.Fatal(err)
			}
		}
	}
	a := r.Applied
	t.Logf("applied: %+v", a)
	if !strings.Contains(r.GODEBUG, "cpu.avx2=off") || !a.SIMDOff {
		t.Errorf("not re-executed with the profile's GODEBUG: %q", r.GODEBUG)
	}
	n := min(8, max(1, runtime.NumCPU()/2))
	if len(a.CPUs) != n || a.GOMAXPROCS != n || len(r.Affinity) != n || r.Affinity[n-1] != runtime.NumCPU()-1 {
		t.Errorf("pinned to %v (affinity %v), GOMAXPROCS %d; want the last %d cores", a.CPUs, r.Affinity, a.GOMAXPROCS, n)
	}
	switch {
	case a.Quota > 0:
		if a.Quota != float64(n)*0.4 || !strings.Contains(r.Cgroup, "hec-agent-") || !r.Released {
			t.Errorf("quota %.2f, cgroup %q, released %v", a.Quota, r.Cgroup, r.Released)
		}
	case os.Geteuid() == 0:
		if _, _, err := cpuCgroupRoot(); err == nil {
			t.Errorf("root, a cpu controller, and no quota: %s", a.QuotaNote)
		}
		t.Logf("quota not applied here: %s", a.QuotaNote)
	default:
		if a.QuotaNote == "" {
			t.Error("no quota and no reason")
		}
		t.Logf("not root: %s", a.QuotaNote)
	}
}
