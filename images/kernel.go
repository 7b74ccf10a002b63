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

// Kernel is an unpacked Debian kernel package.
type Kernel struct {
	Package    string          // e.g. linux-image-6.1.0-57-arm64
	Version    string          // the package version, e.g. 6.1.192-3
	Release    string          // uname -r, e.g. 6.1.0-57-arm64
	Image      string          // path of the kernel image (arm64: the uncompressed Image; amd64: a bzImage)
	ModulesDir string          // lib/modules/RELEASE
	Builtin    map[string]bool // modules built into the kernel
}

// Metapackage is what FetchKernel resolves to an exact kernel package
// (FetchKernelFor: linux-image-ARCH).
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
	return FetchKernelFor(ctx, cacheDir, "arm64", w)
}

// FetchKernelFor is FetchKernelTo for Debian's kernel of arch (arm64, the
// agent's image; amd64, the x86_64 test guests).
func FetchKernelFor(ctx context.Context, cacheDir, arch string, w io.Writer) (Kernel, error) {
	var k Kernel
	cacheDir, err := filepath.Abs(cacheDir)
	if err != nil {
		return k, err
	}
	native, _ := run(ctx, "", "dpkg", "--print-architecture")
	archs, _ := run(ctx, "", "dpkg", "--print-foreign-architectures")
	if strings.TrimSpace(string(native)) != arch && !bytes.Contains(archs, []byte(arch)) {
		if _, err := run(ctx, "", "dpkg", "--add-architecture", arch); err != nil {
			return k, fmt.Errorf("enable %s packages (needs root): %w", arch, err)
		}
		if _, err := run(ctx, "", "apt-get", "update", "-qq"); err != nil {
			return k, err
		}
	}
	meta := "linux-image-" + arch
	fmt.Fprintf(w, "kernel: resolving %s:%s with apt\n", meta, arch)
	pkg, err := resolveKernel(ctx, meta, arch)
	if err != nil {
		if _, uerr := run(ctx, "", "apt-get", "update", "-qq"); uerr != nil {
			return k, fmt.Errorf("%v; apt-get update: %w", err, uerr)
		}
		if pkg, err = resolveKernel(ctx, meta, arch); err != nil {
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
		fmt.Fprintf(w, "kernel: downloading %s:%s (60-70 MB, once: cached in %s)\n", pkg, arch, dir)
		args := []string{"download", pkg + ":" + arch}
		if os.Geteuid() == 0 {
			// apt's sandbox user cannot write a root-owned cache.
			args = append([]string{"-o", "APT::Sandbox::User=root"}, args...)
		}
		dl := exec.CommandContext(ctx, "apt-get", args...)
		dl.Dir, dl.Stdout, dl.Stderr = dir, w, w
		if err := dl.Run(); err != nil {
			return k, fmt.Errorf("apt-get download %s:%s: %w", pkg, arch, err)
		}
		fmt.Fprintf(w, "kernel: unpacking\n")
		debs, _ := filepath.Glob(filepath.Join(dir, pkg+"_*_"+arch+".deb"))
		if len(debs) != 1 {
			return k, fmt.Errorf("downloaded %d packages for %s", len(debs), pkg)
		}
		if _, err := run(ctx, dir, "dpkg", "-x", debs[0], root); err != nil {
			return k, err
		}
	}
	fmt.Fprintf(w, "kernel: %s\n", k.Image)
	debs, _ := filepath.Glob(filepath.Join(dir, pkg+"_*_"+arch+".deb"))
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

func resolveKernel(ctx context.Context, meta, arch string) (string, error) {
	out, err := run(ctx, "", "apt-cache", "depends", meta+":"+arch)
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(out), "\n") {
		l = strings.TrimSpace(l)
		if dep, ok := strings.CutPrefix(l, "Depends: "); ok && strings.HasPrefix(dep, "linux-image-") {
			return strings.TrimSuffix(dep, ":"+arch), nil
		}
	}
	return "", fmt.Errorf("apt-cache depends %s:%s names no kernel image", meta, arch)
}
