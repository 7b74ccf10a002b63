package affinity

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestShares(t *testing.T) {
	for _, tc := range []struct {
		cpus []int
		n    int
		want [][]int
	}{
		{[]int{0, 1}, 2, [][]int{{0}, {1}}},
		{[]int{0, 1}, 1, [][]int{{0, 1}}},
		{[]int{0, 1}, 4, [][]int{{0}, {1}, {0}, {1}}},
		{[]int{3, 5, 6}, 4, [][]int{{3}, {5}, {6}, {3}}},
		{[]int{0, 1, 2, 3, 4, 5, 6}, 3, [][]int{{0, 1}, {2, 3}, {4, 5}}},
		{[]int{2, 5, 7}, 3, [][]int{{2}, {5}, {7}}},
		{[]int{0}, 0, nil},
		{nil, 1, nil},
	} {
		got := Shares(tc.cpus, tc.n)
		if !slices.EqualFunc(got, tc.want, slices.Equal) || (got == nil) != (tc.want == nil) {
			t.Errorf("Shares(%v, %d) = %v, want %v", tc.cpus, tc.n, got, tc.want)
		}
	}
	// A share cannot grow into the next one.
	s := Shares([]int{0, 1, 2, 3}, 2)
	_ = append(s[0], 9)
	if s[1][0] != 2 {
		t.Errorf("appending to share 0 changed share 1: %v", s)
	}
}

// A child started on one CPU sees only it, and the thread that started it
// has its CPUs back.
func TestStartRunsTheChildOnTheCPUs(t *testing.T) {
	all, err := Allowed()
	if err != nil {
		t.Fatal(err)
	}
	one := all[len(all)-1:]
	cmd := exec.Command("grep", "Cpus_allowed_list", "/proc/self/status")
	var out strings.Builder
	cmd.Stdout = &out
	if err := Start(cmd, one); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(strings.TrimPrefix(out.String(), "Cpus_allowed_list:")); got != strconv.Itoa(one[0]) {
		t.Errorf("child's CPUs %q, want %d", got, one[0])
	}
	after, err := Allowed()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(after, all) {
		t.Errorf("this thread's CPUs %v after Start, want %v back", after, all)
	}
}

func TestDoSaysWhatItCannotDo(t *testing.T) {
	var set unix.CPUSet
	for _, cpus := range [][]int{{-1}, {len(set) * 64}} {
		ran := false
		if err := Do(cpus, func() error { ran = true; return nil }); err == nil || ran {
			t.Errorf("Do(%v): err %v, ran %v; want an error and f not run", cpus, err, ran)
		}
	}
	all, _ := Allowed()
	ran := false
	if err := Do(nil, func() error { ran = true; return nil }); err != nil || !ran {
		t.Errorf("Do(nil): err %v, ran %v", err, ran)
	}
	if after, _ := Allowed(); !slices.Equal(after, all) {
		t.Errorf("CPUs %v after Do, want %v", after, all)
	}
}

func TestOfProcess(t *testing.T) {
	all, err := Allowed()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "10")
	if err := Start(cmd, all[:1]); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	if got, err := OfProcess(cmd.Process.Pid); err != nil || !slices.Equal(got, all[:1]) {
		t.Errorf("OfProcess = %v, %v; want %v", got, err, all[:1])
	}
	if _, err := OfProcess(-1); err == nil {
		t.Error("OfProcess(-1): no error")
	}
}

func TestPinProcess(t *testing.T) {
	all, err := Allowed()
	if err != nil {
		t.Fatal(err)
	}
	if err := PinProcess(all[:1]); err != nil {
		t.Fatal(err)
	}
	got, err := OfProcess(os.Getpid())
	if err := PinProcess(all); err != nil {
		t.Fatal(err)
	}
	if err != nil || !slices.Equal(got, all[:1]) {
		t.Errorf("every thread on %v (%v), want %v", got, err, all[:1])
	}
	if back, err := OfProcess(os.Getpid()); err != nil || !slices.Equal(back, all) {
		t.Errorf("after pinning back: %v (%v), want %v", back, err, all)
	}
	if err := PinProcess([]int{-1}); err == nil {
		t.Error("PinProcess([-1]): no error")
	}
}
