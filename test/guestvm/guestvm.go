package guestvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hecsys/hec/images"
	"github.com/hecsys/hec/test/testutil"
)

// Modules are what the guest loads (their dependencies first): virtio's
// network, 9p for the file systems, soft-RoCE and the RDMA connection
// manager's device (rdma_ucm).
var Modules = []string{"virtio_pci", "virtio_net", "9pnet_virtio", "9p", "crc32_generic", "rdma_rxe", "rdma_ucm"}

// ErrNoQEMU says qemu-system-x86_64 is not installed.
var ErrNoQEMU = errors.New("qemu-system-x86_64 is not installed (make test-deps installs qemu-system-x86 as root)")

// Options are one guest's.
type Options struct {
	// Work is shared read-write at /mnt; Script is written to
	// Work/run.sh and run by /bin/sh, its output in Work/out.log.
	Work   string
	Script string
	// NetDev is eth0's QEMU -netdev spec without its id
	// ("socket,listen=127.0.0.1:PORT"); empty: user-mode networking.
	NetDev string
	MAC    string // default 52:54:00:12:34:56
	// NetNS, when set, runs QEMU in that network namespace (where a
	// tap named by NetDev is: a test cluster's switch, say).
	NetNS string
	// MemoryMiB (default 1024) and Timeout (default 3 min) bound it.
	MemoryMiB int
	Timeout   time.Duration
}

var (
	prepOnce sync.Once
	prepErr  error
	kernel   images.Kernel
	initrd   string
)

// prepare fetches the amd64 kernel (once, into the repository's .cache)
// and builds the initramfs (once per process).
func prepare(ctx context.Context) error {
	prepOnce.Do(func() {
		if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
			prepErr = ErrNoQEMU
			return
		}
		if kernel, prepErr = images.FetchKernelFor(ctx, filepath.Join(testutil.ModuleRoot(), ".cache"), "amd64", io.Discard); prepErr != nil {
			prepErr = fmt.Errorf("guestvm: the amd64 kernel: %w", prepErr)
			return
		}
		initrd, prepErr = buildInitramfs()
	})
	return prepErr
}

func buildInitramfs() (string, error) {
	dir, err := testutil.ProcessDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "guestvm-init")
	cmd := exec.Command("go", "build", "-o", bin, "./test/guestvm/init")
	cmd.Dir, cmd.Env = testutil.ModuleRoot(), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("guestvm: build init: %v\n%s", err, out)
	}
	initBin, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	mods, err := images.ScanModules(kernel.ModulesDir)
	if err != nil {
		return "", err
	}
	order, err := images.LoadOrder(mods, kernel.Builtin, Modules)
	if err != nil {
		return "", fmt.Errorf("guestvm: modules: %w", err)
	}
	files := []images.File{{Path: "init", Mode: 0o755, Data: initBin}}
	var list []string
	for _, m := range order {
		b, err := os.ReadFile(m.Path)
		if err != nil {
			return "", err
		}
		name := "lib/modules/" + filepath.Base(m.Path)
		files = append(files, images.File{Path: name, Mode: 0o644, Data: b})
		list = append(list, "/"+name)
	}
	files = append(files, images.File{Path: "etc/modules.list", Mode: 0o644, Data: []byte(strings.Join(list, "\n") + "\n")})
	var buf bytes.Buffer
	if err := images.WriteCPIO(&buf, files); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "guestvm-initramfs.cpio")
	return path, os.WriteFile(path, buf.Bytes(), 0o644)
}

var (
	accelOnce sync.Once
	accel     string
	accelWhy  string
)

// Accel is how guests run here, "kvm" or "tcg", and why not KVM where
// not: KVM is used where /dev/kvm boots a guest that runs a script
// within 15 s. The verdict is kept in .cache/guestvm-accel for this
// machine's kernel and QEMU (a check costs 15 s where KVM fails);
// HEC_GUEST_ACCEL=kvm|tcg forces it.
func Accel(ctx context.Context) (string, string) {
	accelOnce.Do(func() {
		if a := os.Getenv("HEC_GUEST_ACCEL"); a == "kvm" || a == "tcg" {
			accel, accelWhy = a, "HEC_GUEST_ACCEL="+a
			return
		}
		var uname unix.Utsname
		unix.Uname(&uname)
		qv, _ := exec.Command("qemu-system-x86_64", "--version").Output()
		stamp := unix.ByteSliceToString(uname.Release[:]) + " " + strings.SplitN(string(qv), "\n", 2)[0]
		cache := filepath.Join(testutil.ModuleRoot(), ".cache", "guestvm-accel")
		if b, err := os.ReadFile(cache); err == nil {
			if lines := strings.SplitN(string(b), "\n", 3); len(lines) == 3 && lines[0] == stamp && (lines[1] == "kvm" || lines[1] == "tcg") {
				accel, accelWhy = lines[1], strings.TrimSpace(lines[2])+" (checked before: "+cache+")"
				return
			}
		}
		defer func() {
			os.MkdirAll(filepath.Dir(cache), 0o755)
			os.WriteFile(cache, []byte(stamp+"\n"+accel+"\n"+accelWhy+"\n"), 0o644)
		}()
		accel = "tcg"
		f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
		if err != nil {
			accelWhy = fmt.Sprintf("no KVM: %v", err)
			return
		}
		f.Close()
		work, err := os.MkdirTemp("", "guestvm-kvm")
		if err != nil {
			accelWhy = err.Error()
			return
		}
		defer os.RemoveAll(work)
		out, err := run(ctx, "kvm", Options{Work: work, Script: "echo booted", Timeout: 15 * time.Second})
		if err == nil && strings.Contains(string(out), "booted") {
			accel, accelWhy = "kvm", "KVM boots a guest here"
			return
		}
		accelWhy = "a KVM guest did not run a script within 15 s here: TCG instead"
		if err != nil {
			accelWhy = fmt.Sprintf("a KVM guest did not run a script within 15 s here (%v): TCG instead", err)
		}
	})
	return accel, accelWhy
}

// Run boots a guest that runs o.Script and powers off, and returns the
// script's output; an error when the guest did not get to run it, or the
// script failed (its output then says why).
func Run(ctx context.Context, o Options) ([]byte, error) {
	if err := prepare(ctx); err != nil {
		return nil, err
	}
	a, _ := Accel(ctx)
	return run(ctx, a, o)
}

func run(ctx context.Context, accel string, o Options) ([]byte, error) {
	if err := prepare(ctx); err != nil {
		return nil, err
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 1024
	}
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Minute
	}
	if o.MAC == "" {
		o.MAC = "52:54:00:12:34:56"
	}
	netdev := "user"
	if o.NetDev != "" {
		netdev = o.NetDev
	}
	log := filepath.Join(o.Work, "out.log")
	os.Remove(log)
	if err := os.WriteFile(filepath.Join(o.Work, "run.sh"), []byte(o.Script+"\n"), 0o755); err != nil {
		return nil, err
	}
	args := []string{"-m", fmt.Sprint(o.MemoryMiB), "-smp", "1", "-nographic", "-no-reboot", "-nic", "none",
		"-kernel", kernel.Image, "-initrd", initrd, "-append", "console=ttyS0 quiet panic=-1",
		"-virtfs", "local,path=/,mount_tag=root,security_model=none,readonly=on",
		"-virtfs", "local,path=" + o.Work + ",mount_tag=work,security_model=none",
		"-netdev", netdev + ",id=n0", "-device", "virtio-net-pci,netdev=n0,romfile=,mac=" + o.MAC}
	if accel == "kvm" {
		args = append([]string{"-enable-kvm", "-cpu", "host,-arch-capabilities"}, args...)
	} else {
		args = append([]string{"-accel", "tcg", "-cpu", "max"}, args...)
	}
	rctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, "qemu-system-x86_64", args...)
	if o.NetNS != "" {
		cmd = exec.CommandContext(rctx, "ip", append([]string{"netns", "exec", o.NetNS, "qemu-system-x86_64"}, args...)...)
	}
	var console bytes.Buffer
	cmd.Stdout, cmd.Stderr = &console, &console
	err := cmd.Run()
	out, rerr := os.ReadFile(log)
	if rerr != nil {
		return nil, fmt.Errorf("guestvm (%s): the script did not run (%v); the console's last line: %q", accel, err, lastLine(console.Bytes()))
	}
	if !bytes.Contains(out, []byte("\nguestvm: exit 0 ")) {
		if rctx.Err() != nil {
			return out, fmt.Errorf("guestvm (%s): not done within %v", accel, o.Timeout)
		}
		return out, fmt.Errorf("guestvm (%s): the script failed", accel)
	}
	return out, nil
}

// lastLine is the console's last line with printable characters, its
// terminal escapes dropped.
func lastLine(b []byte) string {
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.Map(func(r rune) rune {
			if r < ' ' || r == 0x7f {
				return -1
			}
			return r
		}, lines[i])
		if j := strings.LastIndex(l, "[2J"); j >= 0 { // a screen clear and what came before it
			l = l[j+3:]
		}
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}
