package images

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Kernel is an unpacked Debian arm64 kernel package.
type Kernel struct {
	Package    string          // e.g. linux-image-6.1.0-57-arm64
	Version    string          // the package version, e.g. 6.1.192-3
	Release    string          // uname -r, e.g. 6.1.0-57-arm64
	Image      string          // path of the uncompressed arm64 Image
	ModulesDir string          // lib/modules/RELEASE
	Builtin    map[string]bool // modules built into the kernel
}

// Metapackage is what FetchKernel resolves to an exact kernel package.
const Metapackage = "linux-image-arm64"

func run(ctx context.Context, dir string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// FetchKernel resolves the linux-image-arm64 metapackage with apt, downloads
// the kernel package into cacheDir/kernel and unpacks it there, once. It
// enables the arm64 architecture for apt when needed (root only).
func FetchKernel(ctx context.Context, cacheDir string) (Kernel, error) {
	return FetchKernelTo(ctx, cacheDir, io.Discard)
}

// FetchKernelTo is FetchKernel saying what it does on w, a line a step;
// apt's own download progress goes to w as well.
func FetchKernelTo(ctx context.Context, cacheDir string, w io.Writer) (Kernel, error) {
	var k Kernel
	cacheDir, err := filepath.Abs(cacheDir)
	if err != nil {
		return k, err
	}
	archs, _ := run(ctx, "", "dpkg", "--print-foreign-architectures")
	if !bytes.Contains(archs, []byte("arm64")) {
		if _, err := run(ctx, "", "dpkg", "--add-architecture", "arm64"); err != nil {
			return k, fmt.Errorf("enable arm64 packages (needs root): %w", err)
		}
		if _, err := run(ctx, "", "apt-get", "update", "-qq"); err != nil {
			return k, err
		}
	}
	fmt.Fprintf(w, "kernel: resolving %s:arm64 with apt\n", Metapackage)
	pkg, err := resolveKernel(ctx)
	if err != nil {
		if _, uerr := run(ctx, "", "apt-get", "update", "-qq"); uerr != nil {
			return k, fmt.Errorf("%v; apt-get update: %w", err, uerr)
		}
		if pkg, err = resolveKernel(ctx); err != nil {
			return k, err
		}
	}
	k.Package = pkg
	k.Release = strings.TrimPrefix(pkg, "linux-image-")
	dir := filepath.Join(cacheDir, "kernel", pkg)
	root := filepath.Join(dir, "root")
	k.Image = filepath.Join(root, "boot", "vmlinuz-"+k.Release)
	k.ModulesDir = filepath.Join(root, "lib", "modules", k.Release)
	if _, err := os.Stat(k.Image); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return k, err
		}
		fmt.Fprintf(w, "kernel: downloading %s:arm64 (about 60 MB, once: cached in %s)\n", pkg, dir)
		args := []string{"download", pkg + ":arm64"}
		if os.Geteuid() == 0 {
			// apt's sandbox user cannot write a root-owned cache.
			args = append([]string{"-o", "APT::Sandbox::User=root"}, args...)
		}
		dl := exec.CommandContext(ctx, "apt-get", args...)
		dl.Dir, dl.Stdout, dl.Stderr = dir, w, w
		if err := dl.Run(); err != nil {
			return k, fmt.Errorf("apt-get download %s:arm64: %w", pkg, err)
		}
		fmt.Fprintf(w, "kernel: unpacking\n")
		debs, _ := filepath.Glob(filepath.Join(dir, pkg+"_*_arm64.deb"))
		if len(debs) != 1 {
			return k, fmt.Errorf("downloaded %d packages for %s", len(debs), pkg)
		}
		if _, err := run(ctx, dir, "dpkg", "-x", debs[0], root); err != nil {
			return k, err
		}
	}
	fmt.Fprintf(w, "kernel: %s\n", k.Image)
	debs, _ := filepath.Glob(filepath.Join(dir, pkg+"_*_arm64.deb"))
	if len(debs) == 1 {
		parts := strings.Split(filepath.Base(debs[0]), "_")
		k.Version = parts[1]
	}
	k.Builtin = map[string]bool{}
	if f, err := os.Open(filepath.Join(k.ModulesDir, "modules.builtin")); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			k.Builtin[modName(strings.TrimSuffix(filepath.Base(s.Text()), ".ko"))] = true
		}
		f.Close()
	}
	return k, nil
}

func resolveKernel(ctx context.Context) (string, error) {
	out, err := run(ctx, "", "apt-cache", "depends", Metapackage+":arm64")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(out), "\n") {
		l = strings.TrimSpace(l)
		if dep, ok := strings.CutPrefix(l, "Depends: "); ok && strings.HasPrefix(dep, "linux-image-") {
			return strings.TrimSuffix(dep, ":arm64"), nil
		}
	}
	return "", fmt.Errorf("apt-cache depends %s:arm64 names no kernel image", Metapackage)
}
