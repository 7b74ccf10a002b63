package images

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
)

// RDMALibraries are the libraries hecd opens at run time for RDMA (the
// verbs shim's dlopen): an image whose agent is dynamically linked
// carries them, with what they need, and libibverbs' soft-RoCE provider.
var RDMALibraries = []string{"libibverbs.so.1", "librdmacm.so.1"}

// RDMAProviders are libibverbs' providers an image carries (soft-RoCE:
// the VMs' NICs have no RDMA of their own), each with its driver file.
var RDMAProviders = []string{"rxe"}

// triplets are the multiarch directories' names of the ELF machines an
// agent is built for.
var triplets = map[elf.Machine]string{elf.EM_AARCH64: "aarch64-linux-gnu", elf.EM_X86_64: "x86_64-linux-gnu"}

// libRoot is where DynamicRuntime reads the libraries from: this
// machine's root (Debian's multiarch packages of the agent's
// architecture: libc6, libibverbs1, librdmacm1, ibverbs-providers).
var libRoot = "/"

// DynamicRuntime returns what a dynamically linked agent needs in its
// image to run as /init: its ELF interpreter, the shared libraries it
// needs and those it opens for RDMA (RDMALibraries, RDMAProviders with
// their driver files), each with the libraries it needs in turn, read
// from this machine's multiarch directories of the agent's architecture.
// A static agent needs none of it: nil (nor does what is no ELF binary). The files keep their paths (the
// interpreter's name a link, as on Debian), so the loader's default
// directories find them.
func DynamicRuntime(agent []byte) ([]File, error) {
	f, err := elf.NewFile(bytes.NewReader(agent))
	var notELF *elf.FormatError
	if errors.As(err, &notELF) {
		return nil, nil // not an ELF (a test's stand-in): nothing known to carry
	}
	if err != nil {
		return nil, fmt.Errorf("agent binary: %w", err)
	}
	defer f.Close()
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return nil, fmt.Errorf("agent binary: its interpreter: %w", err)
			}
			interp = string(bytes.TrimRight(b, "\x00"))
		}
	}
	if interp == "" {
		return nil, nil // static
	}
	triplet, ok := triplets[f.Machine]
	if !ok {
		return nil, fmt.Errorf("agent binary: machine %v: no multiarch directory known", f.Machine)
	}
	libDir := path.Join("lib", triplet)
	providerDir := path.Join("usr/lib", triplet, "libibverbs")
	var files []File
	have := map[string]bool{}
	// add puts the file at name (a path in the image) and what it needs.
	var add func(name string) error
	add = func(name string) error {
		if have[name] {
			return nil
		}
		have[name] = true
		data, err := os.ReadFile(filepath.Join(libRoot, name)) // through links: the file itself
		if err != nil {
			return fmt.Errorf("the agent's runtime: %w (install the %s packages of libc6, libibverbs1, librdmacm1, ibverbs-providers)", err, triplet)
		}
		files = append(files, File{Path: name, Mode: 0o755, Data: data})
		lf, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		defer lf.Close()
		needed, err := lf.ImportedLibraries()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for _, lib := range needed {
			if err := add(findLib(triplet, lib)); err != nil {
				return err
			}
		}
		return nil
	}
	// The interpreter where the agent names it, a link to the file in
	// the multiarch directory (Debian's layout).
	base := path.Base(interp)
	if err := add(path.Join(libDir, base)); err != nil {
		return nil, err
	}
	if target := "/" + path.Join(libDir, base); path.Clean(interp) != target {
		files = append(files, File{Path: path.Clean(interp)[1:], Link: target})
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("agent binary: %w", err)
	}
	for _, lib := range append(needed, RDMALibraries...) {
		if err := add(findLib(triplet, lib)); err != nil {
			return nil, err
		}
	}
	for _, p := range RDMAProviders {
		pattern := filepath.Join(libRoot, providerDir, "lib"+p+"-rdmav*.so")
		matches, _ := filepath.Glob(pattern)
		if len(matches) != 1 {
			return nil, fmt.Errorf("the agent's runtime: libibverbs' %s provider: %d files match %s (install ibverbs-providers:%s)",
				p, len(matches), pattern, archOf(f.Machine))
		}
		if err := add(path.Join(providerDir, filepath.Base(matches[0]))); err != nil {
			return nil, err
		}
		files = append(files, File{Path: path.Join("etc/libibverbs.d", p+".driver"), Mode: 0o644, Data: []byte("driver " + p + "\n")})
	}
	return files, nil
}

// findLib is where lib lives in the image: the multiarch directory of
// /lib, or of /usr/lib where only that one has it on this machine.
func findLib(triplet, lib string) string {
	for _, dir := range []string{path.Join("lib", triplet), path.Join("usr/lib", triplet)} {
		if _, err := os.Stat(filepath.Join(libRoot, dir, lib)); err == nil {
			return path.Join(dir, lib)
		}
	}
	return path.Join("lib", triplet, lib) // not here: add says so
}

func archOf(m elf.Machine) string {
	if m == elf.EM_X86_64 {
		return "amd64"
	}
	return "arm64"
}
