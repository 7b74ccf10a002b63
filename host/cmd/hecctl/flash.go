package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/host/cluster"
	"github.com/hecsys/hec/qemu"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/bundle"
)

// flashResult is what flash prints with -o json.
type flashResult struct {
	Bundle  string             `json:"bundle"`
	Reply   api.UpdateReply    `json:"reply"`
	Outcome *api.UpdateOutcome `json:"outcome,omitempty"`
	Serving string             `json:"serving,omitempty"` // the version serving at the end
}

func flashCmd(a *app) *cobra.Command {
	var dryRun bool
	var timeout time.Duration
	var clusterName, clusterState string
	var maxUnavailable int
	cmd := &cobra.Command{
		Use:   "flash BUNDLE | flash --cluster[=NAME] BUNDLE [BUNDLE…]",
		Short: "install a signed agent bundle into the agent's inactive slot; report its commit or rollback",
		Long: `flash uploads an agent bundle (a directory: hecd, manifest.json, manifest.sig;
mkimage --agent-bundle builds one) to the agent's POST /v1/update. The agent
verifies it (signature with the key it trusts, every part's hash, its
architecture, a version newer than the anti-rollback floor), writes it into
the slot it does not run from, and exits for its loader (hecd supervise, or
process 1) to start the new version. The loader commits it once it is ready,
or rolls back to the committed version; flash waits for that and prints the
versions before and after. --dry-run verifies without installing. A VM
started with hecctl qemu up also takes a machine bundle (make image
VERSION=v… IMAGE_OUT=DIR: a kernel and an initramfs): it reboots into it,
flash booting the VM again as its boot ROM would.

With --cluster, flash is a rolling update of a test cluster's agents
(hecctl cluster up --trusted-key): every agent first verifies its bundle
(one per architecture: an arm64 one for the VMs), and nothing is installed
unless all of them would take it; then --max-unavailable agents at a time
are updated and waited for; the first rollback or failure stops the
rollout, the agents not yet updated stay on their version, and a table of
every node's version before and after says which.`,
		Args: wantArgs(1, -1, "the bundle directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if clusterName != "" {
				if cmd.Flags().Changed("agent") || cmd.Flags().Changed("mgmt") {
					return usageError{fmt.Errorf("flash: --cluster or --agent/--mgmt, not both")}
				}
				return a.flashCluster(cmd.Context(), clusterName, clusterState, args, host.RolloutOptions{
					MaxUnavailable: maxUnavailable, DryRun: dryRun, Timeout: timeout})
			}
			if len(args) > 1 {
				return usageError{fmt.Errorf("flash: one bundle for one agent (several, one per architecture, with --cluster)")}
			}
			if cmd.Flags().Changed("max-unavailable") {
				return usageError{fmt.Errorf("flash: --max-unavailable is for a rolling update (--cluster)")}
			}
			dir := args[0]
			if _, err := os.Stat(filepath.Join(dir, bundle.ManifestFile)); err != nil {
				return usageError{fmt.Errorf("%s: not a bundle directory (no %s): %w", dir, bundle.ManifestFile, err)}
			}
			ctx := cmd.Context()
			m := a.client()
			size := dirSize(dir)
			update, finish := progress("flash " + filepath.Base(dir))
			reply, err := m.Update(ctx, dir, dryRun, func(n int64) { update(n, size) })
			finish()
			if err != nil {
				return err
			}
			res := flashResult{Bundle: dir, Reply: reply}
			if dryRun {
				if a.jsonOut() {
					return a.printJSON(res)
				}
				fmt.Fprintf(a.out, "verified: %s is hecd %s for %s; it would go into slot %s (running: %s). Nothing installed.\n",
					dir, reply.Version, reply.Arch, reply.Slot, reply.From)
				return nil
			}
			if !a.jsonOut() {
				fmt.Fprintf(a.out, "installed hecd %s into slot %s (was %s); the agent restarts into it…\n", reply.Version, reply.Slot, reply.From)
			}
			wctx, cancel := context.WithTimeout(ctx, timeout)
			if vm := a.localVM(); vm != nil {
				// A VM this machine runs: a machine bundle reboots it into
				// its new kernel, and the harness is its boot ROM.
				go qemu.KeepBooted(wctx, vm.StateDir, os.Stderr)
			}
			out, st, err := m.WaitUpdate(wctx, reply.Version)
			cancel()
			if err != nil {
				return err
			}
			serving := st.Version
			res.Outcome, res.Serving = out, serving
			if a.jsonOut() {
				if err := a.printJSON(res); err != nil {
					return err
				}
			} else if out.Result == api.UpdateCommitted {
				fmt.Fprintf(a.out, "committed: hecd %s → %s (slot %s); serving %s\n", out.From, out.Version, out.Slot, serving)
			} else {
				fmt.Fprintf(a.out, "rolled back: hecd %s in slot %s: %s; serving %s\n", out.Version, out.Slot, out.Reason, serving)
			}
			if out.Result != api.UpdateCommitted {
				return fmt.Errorf("update to %s rolled back: %s", out.Version, out.Reason)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "verify the bundle on the agent without installing it")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the commit or the rollback (of each agent, with --cluster)")
	cmd.Flags().StringVar(&clusterName, "cluster", "", "a rolling update of the test cluster NAME's agents (--cluster=NAME; --cluster alone: hec)")
	cmd.Flags().Lookup("cluster").NoOptDefVal = "hec"
	cmd.Flags().StringVar(&clusterState, "cluster-state", "", "the cluster's state directory (default /run/hec/cluster-NAME)")
	cmd.Flags().IntVar(&maxUnavailable, "max-unavailable", 1, "agents restarting at once in a rolling update")
	return uses(cmd, useAgent|useMgmt|useOutput)
}

// flashCluster is a rolling update of cluster name's agents.
func (a *app) flashCluster(ctx context.Context, name, state string, bundles []string, o host.RolloutOptions) error {
	if o.MaxUnavailable < 1 {
		return usageError{fmt.Errorf("--max-unavailable %d: at least 1", o.MaxUnavailable)}
	}
	st, err := cluster.Load(name, state)
	if err != nil {
		return err
	}
	var targets []host.RolloutTarget
	for _, n := range st.Nodes {
		targets = append(targets, host.RolloutTarget{Name: strconv.Itoa(n.Index),
			Mgmt: &host.Mgmt{Addr: n.Mgmt(), HTTP: cluster.Client(n.NS), Token: n.Token()}})
	}
	o.Bundles = bundles
	if !a.jsonOut() {
		o.Event = func(node, what string) { fmt.Fprintf(os.Stderr, "node %s: %s\n", node, what) }
	}
	rows, err := host.Rollout(ctx, targets, o)
	if rows == nil {
		return err
	}
	if a.jsonOut() {
		if jerr := a.printJSON(map[string]any{"cluster": name, "nodes": rows}); jerr != nil {
			return jerr
		}
		return err
	}
	tw := tabwriter.NewWriter(a.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tARCH\tBEFORE\tAFTER\tRESULT\tREASON")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Node, dash(r.Arch), dash(r.Before), dash(r.After), r.Result, dash(r.Reason))
	}
	if ferr := tw.Flush(); ferr != nil {
		return ferr
	}
	return err
}

// localVM is the VM hecctl booted whose management API is the target's
// (nil when the target is not one).
func (a *app) localVM() *qemu.VM {
	for _, vm := range qemu.List() {
		if vm.Mgmt == a.mgmt {
			return vm
		}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func dirSize(dir string) int64 {
	var n int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

func keysCmd(a *app) *cobra.Command {
	keys := &cobra.Command{Use: "keys", Short: "signing keys for agent bundles"}
	var out string
	gen := &cobra.Command{
		Use:   "gen",
		Short: "make an ed25519 signing key (FILE, 0600) and its public key (FILE.pub), for mkimage --key and hecd supervise --trusted-key",
		Args:  wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usageError{errors.New("--out FILE: where to write the private key")}
			}
			pub, priv, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				return err
			}
			f, err := os.OpenFile(out, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return fmt.Errorf("--out %s: %w (a key is never overwritten)", out, err)
			}
			if _, err := fmt.Fprintln(f, hex.EncodeToString(priv.Seed())); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			if err := os.WriteFile(out+".pub", []byte(hex.EncodeToString(pub)+"\n"), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "private key %s (keep it secret), public key %s.pub: %s\n", out, out, hex.EncodeToString(pub))
			return nil
		},
	}
	gen.Flags().StringVar(&out, "out", "", "the private key's file (the public key goes to FILE.pub)")
	keys.AddCommand(uses(gen, 0))
	return keys
}
