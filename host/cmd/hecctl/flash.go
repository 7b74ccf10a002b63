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
	"time"

	"github.com/spf13/cobra"

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
	cmd := &cobra.Command{
		Use:   "flash BUNDLE",
		Short: "install a signed agent bundle into the agent's inactive slot; report its commit or rollback",
		Long: `flash uploads an agent bundle (a directory: hecd, manifest.json, manifest.sig;
mkimage --agent-bundle builds one) to the agent's POST /v1/update. The agent
verifies it (signature with the key it trusts, every part's hash, its
architecture, a version newer than the anti-rollback floor), writes it into
the slot it does not run from, and exits for its loader (hecd supervise, or
process 1) to start the new version. The loader commits it once it is ready,
or rolls back to the committed version; flash waits for that and prints the
versions before and after. --dry-run verifies without installing.`,
		Args: wantArgs(1, 1, "the bundle directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
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
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the commit or the rollback")
	return uses(cmd, useAgent|useMgmt|useOutput)
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
