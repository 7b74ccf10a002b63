package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hecsys/hec/images"
)

func main() {
	agent := flag.String("agent", "bin/linux_arm64/hecd", "linux/arm64 hecd binary (becomes /init)")
	target := flag.String("target", "qemu", "hardware generation: qemu, bf2 or bf3")
	cache := flag.String("cache", ".cache", "download cache (kernel, development key)")
	out := flag.String("out", "", "bundle directory (default CACHE/images/TARGET)")
	key := flag.String("key", "", "ed25519 signing key, a hex seed (default: a development key in the cache, created on first use)")
	version := flag.String("version", "dev", "version recorded in the manifest (an agent bundle needs a semantic version: v1.2.3)")
	agentOnly := flag.Bool("agent-bundle", false, "build an agent bundle instead (the --agent binary alone, any architecture): what hecctl flash installs into a slot")
	nextKey := flag.String("next-key", "", "agent bundle: hex ed25519 public key the agent trusts once this bundle is committed (key rotation)")
	flag.Parse()
	if *key == "" {
		*key = filepath.Join(*cache, "keys", "dev.ed25519")
	}
	if *agentOnly {
		if *out == "" {
			*out = filepath.Join(*cache, "images", "agent")
		}
		m, err := images.BuildAgent(images.AgentOptions{Agent: *agent, Out: *out, KeyPath: *key, Version: *version, NextKey: *nextKey})
		if err != nil {
			fmt.Fprintln(os.Stderr, "mkimage:", err)
			os.Exit(1)
		}
		fmt.Printf("agent bundle %s: %s for %s, hecd %d bytes sha256 %.16s, signed with %s\n",
			*out, m.Version, m.Arch, m.Parts["hecd"].Size, m.Parts["hecd"].SHA256, *key)
		return
	}
	if *out == "" {
		*out = filepath.Join(*cache, "images", *target)
	}
	k, err := images.FetchKernelTo(context.Background(), *cache, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage: kernel:", err)
		os.Exit(1)
	}
	fmt.Printf("image: initramfs with %s as /init, kernel modules, manifest signed with %s\n", *agent, *key)
	m, err := images.Build(images.BuildOptions{Agent: *agent, Kernel: k, Target: *target, Out: *out, KeyPath: *key, Version: *version})
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
	fmt.Printf("bundle %s: target %s, kernel %s (%s), initramfs %d bytes sha256 %s, signed with %s\n",
		*out, m.Target, m.KernelPackage, m.KernelVersion, m.Parts["initramfs.cpio"].Size, m.Parts["initramfs.cpio"].SHA256[:16], *key)
}
