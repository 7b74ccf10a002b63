package images

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// CrossCC is the C cross compiler an arm64 agent with RDMA is built with
// (Debian's gcc-aarch64-linux-gnu): the verbs shim is C, and cgo needs it.
const CrossCC = "aarch64-linux-gnu-gcc"

// ArmRDMA says whether this machine can build an arm64 agent that serves
// RDMA: the cross compiler, and the arm64 libraries its image carries
// (DynamicRuntime). When it cannot, why: the agent is then built without
// cgo, and says "built without cgo" where RDMA is asked of it. The
// Makefile's build target asks the same two questions.
func ArmRDMA() (ok bool, why string) {
	if _, err := exec.LookPath(CrossCC); err != nil {
		return false, CrossCC + " not installed (gcc-aarch64-linux-gnu)"
	}
	for _, lib := range RDMALibraries {
		if _, err := os.Stat(filepath.Join(libRoot, "usr/lib/aarch64-linux-gnu", lib)); err != nil {
			return false, fmt.Sprintf("no arm64 %s here (libibverbs1:arm64, librdmacm1:arm64)", lib)
		}
	}
	return true, ""
}

// BuildArmAgent builds hecd for linux/arm64 from the module at root into
// out (go build -trimpath, stripped): with cgo and the cross compiler
// where ArmRDMA allows (a dynamically linked agent that serves RDMA; its
// image carries its libraries), else static without cgo.
func BuildArmAgent(ctx context.Context, root, out string) error {
	env := append(os.Environ(), "GOARCH=arm64", "CGO_ENABLED=0")
	args := []string{"build", "-trimpath", "-ldflags", "-s -w", "-o", out}
	kind := "without cgo: no RDMA"
	if ok, why := ArmRDMA(); ok {
		env = append(os.Environ(), "GOARCH=arm64", "CGO_ENABLED=1", "CC="+CrossCC)
		args = append(args, "-tags", "nonvml")
		kind = "with cgo, for RDMA"
	} else {
		kind += " (" + why + ")"
	}
	build := exec.CommandContext(ctx, "go", append(args, "./dpu/cmd/hecd")...)
	build.Dir, build.Env = root, env
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build arm64 hecd %s: %v: %s", kind, err, b)
	}
	return nil
}
