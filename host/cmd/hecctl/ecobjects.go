package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/hecsys/hec/ec/object"
	"github.com/hecsys/hec/host"
)

// Objects across agents: the local agent codes and places them (package
// ec/object); these commands hand it files and take them back.

// withObjects dials the agent and runs f with its EC of k+m (the code of
// what it puts) and opts.
func (a *app) withObjects(ctx context.Context, k, m int, opts []host.ECOption, f func(e *host.EC) error) error {
	e, done, err := a.coder(ctx, ecFlags{k: k, m: m, rails: host.RailsDPU}, opts...)
	if err != nil {
		return err
	}
	defer done()
	return f(e)
}

// objectBar is a progress bar on the terminal for an object of barFrom
// bytes or more, as an option of the EC that moves it; done finishes it.
func objectBar(what string) (opts []host.ECOption, done func()) {
	update, finish := progress(what)
	return []host.ECOption{host.WithObjectProgress(update)}, finish
}

func ecPutCmd(a *app) *cobra.Command {
	var k, m int
	cmd := &cobra.Command{Use: "put NAME FILE", Short: "store FILE as object NAME across agents: the agent codes it and places the shards (- reads stdin)",
		Args: wantArgs(2, 2, "NAME FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var err error
			if args[1] == "-" {
				data, err = io.ReadAll(os.Stdin)
			} else {
				data, err = os.ReadFile(args[1])
			}
			if err != nil {
				return err
			}
			opts, done := objectBar("put " + args[0])
			var h object.Header
			t0 := time.Now()
			err = a.withObjects(cmd.Context(), k, m, opts, func(e *host.EC) (err error) {
				h, err = e.Put(cmd.Context(), args[0], data)
				done()
				return err
			})
			if err != nil {
				return err
			}
			took := time.Since(t0)
			if a.jsonOut() {
				return a.printJSON(map[string]any{"name": h.Name, "version": h.Version, "size": h.Size, "k": k, "m": m, "seconds": took.Seconds()})
			}
			fmt.Fprintf(a.out, "%s: %s in %d+%d, version %s, %v (%s/s)\n", h.Name, humanize.IBytes(uint64(h.Size)), k, m, h.Version,
				took.Round(time.Millisecond), humanize.IBytes(uint64(float64(h.Size)/took.Seconds())))
			return nil
		}}
	cmd.Flags().IntVar(&k, "data", 4, "data shards (k)")
	cmd.Flags().IntVar(&m, "parity", 2, "parity shards (m): the object survives m agents lost")
	return uses(cmd, useAgent|useOutput)
}

func ecGetCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "get NAME FILE", Short: "write object NAME's current version to FILE (- for stdout), rebuilt from any k valid shards",
		Args: wantArgs(2, 2, "NAME FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			var h host.ObjectRead
			opts, done := objectBar("get " + args[0])
			err := a.withObjects(cmd.Context(), 1, 1, opts, func(e *host.EC) (err error) {
				data, h, err = e.Get(cmd.Context(), args[0])
				done()
				return err
			})
			if err != nil {
				return err
			}
			if len(h.Problems) > 0 {
				for _, p := range h.Problems {
					fmt.Fprintf(os.Stderr, "hecctl: %s: %s\n", args[0], p)
				}
				fmt.Fprintf(os.Stderr, "hecctl: %s was read around what is missing or corrupt: hecctl ec stat %s; hecctl ec repair %s\n",
					args[0], args[0], args[0])
			}
			if args[1] == "-" {
				_, err = a.out.Write(data)
				return err
			}
			if err := os.WriteFile(args[1], data, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "%s: %s, version %s → %s\n", h.Name, humanize.IBytes(uint64(h.Size)), h.Version, args[1])
			return nil
		}}
	return uses(cmd, useAgent)
}

func ecRmCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "rm NAME", Short: "delete object NAME (a tombstone on every agent of its placement)",
		Args: wantArgs(1, 1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.withObjects(cmd.Context(), 1, 1, nil, func(e *host.EC) error { return e.Delete(cmd.Context(), args[0]) }); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "%s: deleted\n", args[0])
			return nil
		}}
	return uses(cmd, useAgent)
}

func ecLsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "ls [PREFIX]", Short: "list the objects (whose names start with PREFIX)",
		Args: wantArgs(0, 1, "at most a PREFIX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			var l []object.Header
			err := a.withObjects(cmd.Context(), 1, 1, nil, func(e *host.EC) (err error) {
				l, err = e.List(cmd.Context(), prefix)
				return err
			})
			if err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(l)
			}
			for _, h := range l {
				fmt.Fprintf(a.out, "%-40s %10s  %d+%d  %s  %s\n", h.Name, humanize.IBytes(uint64(h.Size)), h.K, h.M,
					h.Version.Time().UTC().Format(time.RFC3339), h.Version)
			}
			return nil
		}}
	return uses(cmd, useAgent|useOutput)
}

func ecStatCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "stat NAME", Short: "object NAME's version, size, code, and where each shard lives and whether it is healthy",
		Args: wantArgs(1, 1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var st object.Stat
			err := a.withObjects(cmd.Context(), 1, 1, nil, func(e *host.EC) (err error) {
				st, err = e.Stat(cmd.Context(), args[0])
				return err
			})
			if err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(st)
			}
			fmt.Fprintf(a.out, "%s: %s (%d bytes), %d+%d, version %s (%s), %d stripes\n", st.Name, humanize.IBytes(uint64(st.Size)), st.Size,
				st.K, st.M, st.Version, st.Version.Time().UTC().Format(time.RFC3339), st.Stripes())
			fmt.Fprintf(a.out, "redundancy: %d of %d shards healthy", st.Healthy, len(st.Shards))
			if st.Degraded() {
				lost := len(st.Shards) - st.Healthy
				fmt.Fprintf(a.out, " — %d lost: readable while %d more are (hecctl ec repair %s)", lost, max(0, st.M-lost), st.Name)
			}
			fmt.Fprintln(a.out)
			for _, s := range st.Shards {
				kind := "data"
				if s.Index >= st.K {
					kind = "parity"
				}
				fmt.Fprintf(a.out, "  shard %2d (%-6s) node %-3d %-11s %s\n", s.Index, kind, s.Node, s.State, s.Detail)
			}
			for _, p := range st.Problems {
				fmt.Fprintf(a.out, "  ! %s\n", p)
			}
			return nil
		}}
	return uses(cmd, useAgent|useOutput)
}

func ecRepairCmd(a *app) *cobra.Command {
	var all bool
	cmd := &cobra.Command{Use: "repair [NAME | --all]", Short: "rebuild the shards of NAME (or of every object) that are missing, stale or corrupt, and say what was done",
		Args: wantArgs(0, 1, "NAME, or --all"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) == 1) {
				return usageError{fmt.Errorf("ec repair: want NAME or --all")}
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			res, err := a.client().ECRepair(cmd.Context(), name, all)
			if err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(res)
			}
			failed := 0
			for _, r := range res {
				what := "healthy"
				switch {
				case r.Tomb:
					what = "deleted: tombstone spread"
				case len(r.Rebuilt)+len(r.Commits) > 0:
					var did []string
					if len(r.Rebuilt) > 0 {
						did = append(did, fmt.Sprintf("rebuilt shards %v", r.Rebuilt))
					}
					if len(r.Commits) > 0 {
						did = append(did, fmt.Sprintf("re-committed shards %v", r.Commits))
					}
					what = strings.Join(did, ", ")
				}
				fmt.Fprintf(a.out, "%s: %s; %d → %d of %d shards healthy\n", r.Name, what, r.Before, r.After, r.Shards)
				for _, f := range r.Failed {
					fmt.Fprintf(a.out, "  ! %s\n", f)
				}
				if len(r.Failed) > 0 || (!r.Tomb && r.After < r.Shards) {
					failed++
				}
			}
			if failed > 0 {
				return fmt.Errorf("ec repair: %d of %d objects still below full redundancy", failed, len(res))
			}
			return nil
		}}
	cmd.Flags().BoolVar(&all, "all", false, "repair every object")
	return uses(cmd, useMgmt|useOutput)
}
