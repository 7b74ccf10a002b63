package images

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/hecsys/hec/shared/bundle"
)

// Targets an image can be built for: the hardware generation it fits.
var Targets = []string{"qemu", "bf2", "bf3"}

// Modules the agent loads itself, in the order their dependencies allow:
// virtio PCI and network, the state disk, its file system (which asks the
// crypto API for crc32c when it mounts), and soft-RoCE (rdma_rxe, with
// the RDMA core it needs, and the crypto API's crc32, which it asks for
// when a link is added: without it, ENOENT): hecd --rdma-rxe eth0 runs
// it on the VM's NIC, where RDMA is tested without an RDMA NIC; the verbs
// and connection manager's devices (ib_uverbs, rdma_ucm: /dev/infiniband)
// that an agent built with RDMA opens.
var Modules = []string{"failover", "net_failover", "virtio_pci", "virtio_net", "virtio_blk", "crc32c_generic", "ext4", "crc32_generic", "rdma_rxe",
	"ib_uverbs", "rdma_ucm"}

// BuildOptions are the inputs of Build.
type BuildOptions struct {
	Agent   string // path of the linux/arm64 hecd binary: becomes /init
	Kernel  Kernel
	Target  string // one of Targets
	Out     string // the bundle directory
	KeyPath string // ed25519 private key (seed, hex); created if missing
	Version string
}

// Initramfs returns the initramfs bytes for agent and the kernel's
// modules, with trusted as the key agent bundles must be signed with.
func Initramfs(agent []byte, k Kernel, trusted ed25519.PublicKey) ([]byte, []string, error) {
	mods, err := ScanModules(k.ModulesDir)
	if err != nil {
		return nil, nil, err
	}
	order, err := LoadOrder(mods, k.Builtin, Modules)
	if err != nil {
		return nil, nil, err
	}
	libs, err := DynamicRuntime(agent)
	if err != nil {
		return nil, nil, err
	}
	files := append([]File{{Path: "init", Mode: 0o755, Data: agent}}, libs...)
	var list []string
	for _, m := range order {
		rel, err := filepath.Rel(k.ModulesDir, m.Path)
		if err != nil {
			return nil, nil, err
		}
		data, err := os.ReadFile(m.Path)
		if err != nil {
			return nil, nil, err
		}
		p := filepath.Join("lib/modules", k.Release, rel)
		files = append(files, File{Path: p, Mode: 0o644, Data: data})
		list = append(list, "/"+p)
	}
	files = append(files,
		File{Path: "etc/hec/modules", Mode: 0o644, Data: []byte(strings.Join(list, "\n") + "\n")},
		File{Path: "etc/hec/target", Mode: 0o644, Data: nil},
		File{Path: bundle.TrustedKeyPath, Mode: 0o644, Data: []byte(hex.EncodeToString(trusted) + "\n")},
		File{Path: "var/lib/hec", Dir: true, Mode: 0o755},
	)
	var buf bytes.Buffer
	if err := WriteCPIO(&buf, files); err != nil {
		return nil, nil, err
	}
	return buf.Bytes(), list, nil
}

// Build writes a bundle: Image, initramfs.cpio, manifest.json and
// manifest.sig (ed25519 over manifest.json), plus manifest.pub.
func Build(o BuildOptions) (bundle.Manifest, error) {
	var m bundle.Manifest
	if !validTarget(o.Target) {
		return m, fmt.Errorf("target %q: want one of %v", o.Target, Targets)
	}
	agent, err := os.ReadFile(o.Agent)
	if err != nil {
		return m, fmt.Errorf("agent binary: %w", err)
	}
	key, err := loadOrCreateKey(o.KeyPath)
	if err != nil {
		return m, err
	}
	initrd, list, err := Initramfs(agent, o.Kernel, key.Public().(ed25519.PublicKey))
	if err != nil {
		return m, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return m, err
	}
	if err := os.WriteFile(filepath.Join(o.Out, "initramfs.cpio"), initrd, 0o644); err != nil {
		return m, err
	}
	if err := copyFile(o.Kernel.Image, filepath.Join(o.Out, "Image")); err != nil {
		return m, err
	}
	m = bundle.Manifest{Version: o.Version, Target: o.Target, KernelPackage: o.Kernel.Package,
		KernelVersion: o.Kernel.Version, KernelRelease: o.Kernel.Release, Parts: map[string]bundle.Part{}, Arch: "arm64",
		Build: bundle.BuildInfo{Go: runtime.Version(), Revision: revision(), Modules: list}}
	for _, name := range []string{"Image", "initramfs.cpio"} {
		p, err := bundle.HashFile(filepath.Join(o.Out, name))
		if err != nil {
			return m, err
		}
		m.Parts[name] = p
	}
	if err := bundle.Sign(o.Out, m, key); err != nil {
		return m, err
	}
	return m, nil
}

// Verify checks a bundle's signature with the public key beside it
// (manifest.pub: a check of the build, not trust) or pub, when given, and
// every part's hash.
func Verify(dir string, pub ed25519.PublicKey) (bundle.Manifest, error) {
	if pub == nil {
		b, err := os.ReadFile(filepath.Join(dir, bundle.PublicKeyFile))
		if err != nil {
			return bundle.Manifest{}, err
		}
		if pub, err = bundle.ParsePublicKey(b); err != nil {
			return bundle.Manifest{}, fmt.Errorf("%s: %w", bundle.PublicKeyFile, err)
		}
	}
	return bundle.Verify(dir, pub)
}

func validTarget(t string) bool {
	for _, x := range Targets {
		if t == x {
			return true
		}
	}
	return false
}

func revision() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return ""
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// loadOrCreateKey reads an ed25519 seed (hex) from path, creating a new
// development key there (mode 0600) when the file does not exist.
func loadOrCreateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		seed := make([]byte, ed25519.SeedSize)
		if _, err := rand.Read(seed); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, []byte(hex.EncodeToString(seed)+"\n"), 0o600); err != nil {
			return nil, err
		}
		return ed25519.NewKeyFromSeed(seed), nil
	}
	if err != nil {
		return nil, err
	}
	key, err := bundle.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", path, err)
	}
	return key, nil
}

// BuildFromSource builds hecd for linux/arm64 from the module at root
// (BuildArmAgent: with RDMA where this machine can), fetches the kernel into root/.cache, and
// writes a "qemu" bundle to out signed with a key kept there. Tests and
// benchmarks use it to boot the agent they were built with.
func BuildFromSource(ctx context.Context, root, out, version string) (bundle.Manifest, error) {
	k, err := FetchKernel(ctx, filepath.Join(root, ".cache"))
	if err != nil {
		return bundle.Manifest{}, fmt.Errorf("fetch the arm64 kernel: %w", err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return bundle.Manifest{}, err
	}
	agent := filepath.Join(out, "hecd")
	if err := BuildArmAgent(ctx, root, agent); err != nil {
		return bundle.Manifest{}, err
	}
	return Build(BuildOptions{Agent: agent, Kernel: k, Target: "qemu", Out: out, KeyPath: filepath.Join(out, "dev.ed25519"), Version: version})
}
