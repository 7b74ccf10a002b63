package images

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/hecsys/hec/shared/bundle"
)

// AgentTarget is the target of an agent bundle: the hecd binary alone,
// what a loader (hecd supervise, or process 1) runs from a slot.
const AgentTarget = "agent"

// AgentOptions are the inputs of BuildAgent.
type AgentOptions struct {
	Agent   string // path of a hecd binary (its ELF header gives the architecture)
	Out     string // the bundle directory
	KeyPath string // ed25519 private key (seed, hex); created if missing
	Version string // a semantic version: loaders refuse what is not newer than they committed
	NextKey string // optional: hex public key the agent trusts once this bundle is committed
}

// BuildAgent writes an agent bundle: hecd, manifest.json, manifest.sig,
// manifest.pub.
func BuildAgent(o AgentOptions) (bundle.Manifest, error) {
	var m bundle.Manifest
	if _, err := bundle.ParseVersion(o.Version); err != nil {
		return m, err
	}
	arch, err := elfArch(o.Agent)
	if err != nil {
		return m, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return m, err
	}
	dst := filepath.Join(o.Out, bundle.AgentPart)
	if err := copyFile(o.Agent, dst); err != nil {
		return m, err
	}
	if err := os.Chmod(dst, 0o755); err != nil {
		return m, err
	}
	p, err := bundle.HashFile(dst)
	if err != nil {
		return m, err
	}
	m = bundle.Manifest{Version: o.Version, Target: AgentTarget, Arch: arch, NextKey: o.NextKey,
		Parts: map[string]bundle.Part{bundle.AgentPart: p}, Build: bundle.BuildInfo{Go: runtime.Version(), Revision: revision()}}
	key, err := loadOrCreateKey(o.KeyPath)
	if err != nil {
		return m, err
	}
	return m, bundle.Sign(o.Out, m, key)
}

// elfArch returns the GOARCH name of the ELF binary at path.
func elfArch(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("agent binary %s: %w", path, err)
	}
	defer f.Close()
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	}
	return "", fmt.Errorf("agent binary %s: machine %v is neither amd64 nor arm64", path, f.Machine)
}
