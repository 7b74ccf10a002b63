package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/hecsys/hec/ec"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/rail"
)

func ecCmd(a *app) *cobra.Command {
	cmd := groupCmd("ec", "erasure coding: of files into shard files (encode, decode, verify, plan), and of objects across agents (put, get, rm, ls, stat, repair)")
	cmd.AddCommand(ecEncodeCmd(a), ecDecodeCmd(a), ecVerifyCmd(a), ecPlanCmd(a),
		ecPutCmd(a), ecGetCmd(a), ecRmCmd(a), ecLsCmd(a), ecStatCmd(a), ecRepairCmd(a))
	return cmd
}

// ecFlags are the code's shape and where it runs.
type ecFlags struct {
	k, m      int
	rails     string
	objective string
}

func (f *ecFlags) register(cmd *cobra.Command, shape bool) {
	if shape {
		cmd.Flags().IntVar(&f.k, "data", 10, "data shards (k)")
		cmd.Flags().IntVar(&f.m, "parity", 4, "parity shards (m); k+m at most 256")
	}
	railFlag(cmd.Flags(), &f.rails, rail.Auto, rail.Choices, "where coding runs: host (this process), dpu (the agent) or auto (split by columns so both finish together)")
	cmd.Flags().StringVar(&f.objective, "objective", "time", "what auto plans for: time, or host-cpu (the least host CPU within 1.1× of the fastest)")
}

// coder returns the EC of the flags' rails: this process alone for host,
// through the agent (dialled; close it after) otherwise.
func (a *app) coder(ctx context.Context, f ecFlags, opts ...host.ECOption) (*host.EC, func(), error) {
	if err := ec.CheckCounts(f.k, f.m); err != nil {
		return nil, nil, usageError{fmt.Errorf("--data %d --parity %d: want at least one of each, at most %d shards in all", f.k, f.m, ec.MaxShards)}
	}
	obj := rail.Time // commands without --objective (ec put, get)
	if f.objective != "" {
		var err error
		if obj, err = rail.ParseObjective(f.objective); err != nil {
			return nil, nil, usageError{err}
		}
	}
	if f.rails == host.RailsHost {
		e, err := host.NewEC(nil, f.k, f.m)
		return e, func() {}, err
	}
	cl, err := a.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	e, err := cl.EC(f.k, f.m, append(opts, host.WithRails(f.rails), host.WithObjective(obj))...)
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	return e, func() { cl.Close() }, nil
}

// ecBar is a progress bar on the terminal for work of barFrom bytes or
// more, as an ec.Option; done finishes it.
func ecBar(what string) (ec.Option, func()) {
	update, finish := progress(what)
	return ec.WithProgress(update), finish
}

// streamOptions are the options that make streaming code through e: its
// round buffers in the window, rounds that fit it.
func streamOptions(e *host.EC) []ec.Option {
	return []ec.Option{ec.WithBuffers(e.Buffers), ec.WithChunk(e.Chunk())}
}

// ecSummary is what encode and decode report of the coding itself.
type ecSummary struct {
	Rails        string           `json:"rails"`
	RailBytes    map[string]int64 `json:"rail_bytes"`
	Seconds      float64          `json:"seconds"`
	HostCPU      float64          `json:"host_cpu_seconds"`
	HostCPUPerGB float64          `json:"host_cpu_seconds_per_gb"`
}

func summary(e *host.EC, took time.Duration) ecSummary {
	st := e.Stats()
	return ecSummary{Rails: e.Rails(), RailBytes: st.RailBytes, Seconds: took.Seconds(), HostCPU: st.HostCPU.Seconds(), HostCPUPerGB: st.HostCPUPerGB()}
}

func (s ecSummary) text(size int64) string {
	var parts []string
	var total int64
	for _, v := range s.RailBytes {
		total += v
	}
	for _, r := range []string{host.RailHost, host.RailDPU} {
		if v := s.RailBytes[r]; v > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", r, 100*float64(v)/float64(total)))
		}
	}
	rate := ""
	if s.Seconds > 0 {
		rate = fmt.Sprintf(", %s/s", humanize.IBytes(uint64(float64(size)/s.Seconds)))
	}
	return fmt.Sprintf("  rails %s: %s of the columns; %.2f s%s; host CPU %.3f s in the coder (%.3f s per GB)",
		s.Rails, strings.Join(parts, ", "), s.Seconds, rate, s.HostCPU, s.HostCPUPerGB)
}

func ecEncodeCmd(a *app) *cobra.Command {
	var f ecFlags
	var in, out string
	cmd := &cobra.Command{
		Use:   "encode --in FILE --out DIR",
		Short: "code FILE into k data and m parity shard files in DIR, with DIR/manifest.json",
		Args:  wantArgs(0, 0, "no arguments (--in FILE --out DIR)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if in == "" || out == "" {
				return usageError{errors.New("ec encode: --in FILE and --out DIR are required")}
			}
			ctx := cmd.Context()
			if _, err := os.Stat(in); err != nil {
				return err
			}
			e, done, err := a.coder(ctx, f)
			if err != nil {
				return err
			}
			defer done()
			bar, finish := ecBar("encode " + in)
			t0 := time.Now()
			man, err := ec.EncodeFile(ctx, e, f.k, f.m, in, out, append(streamOptions(e), bar)...)
			finish()
			if err != nil {
				return err
			}
			sum := summary(e, time.Since(t0))
			if a.jsonOut() {
				return a.printJSON(struct {
					Manifest *ec.Manifest `json:"manifest"`
					Coding   ecSummary    `json:"coding"`
				}{man, sum})
			}
			fmt.Fprintf(a.out, "encoded %s (%d bytes) into %s: %d data + %d parity shards of %d bytes\n", in, man.Size, out, man.DataShards, man.ParityShards, man.ShardSize)
			fmt.Fprintln(a.out, sum.text(man.Size))
			return nil
		},
	}
	f.register(cmd, true)
	cmd.Flags().StringVar(&in, "in", "", "the file to encode")
	cmd.Flags().StringVar(&out, "out", "", "the directory for the shards and manifest.json (created; must not hold a manifest)")
	return uses(cmd, useAgent|useOutput)
}

func ecDecodeCmd(a *app) *cobra.Command {
	var f ecFlags
	var in, out string
	cmd := &cobra.Command{
		Use:   "decode --in DIR --out FILE",
		Short: "rebuild FILE from the valid shards left in DIR (any k of k+m; corrupt ones are found and skipped)",
		Args:  wantArgs(0, 0, "no arguments (--in DIR --out FILE)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if in == "" || out == "" {
				return usageError{errors.New("ec decode: --in DIR and --out FILE are required")}
			}
			ctx := cmd.Context()
			man, err := ec.ReadManifest(in)
			if err != nil {
				return err
			}
			f.k, f.m = man.DataShards, man.ParityShards
			e, done, err := a.coder(ctx, f)
			if err != nil {
				return err
			}
			defer done()
			bar, finish := ecBar("decode " + out)
			t0 := time.Now()
			rep, err := ec.DecodeDir(ctx, e, in, out, append(streamOptions(e), bar)...)
			finish()
			if rep != nil && !a.jsonOut() {
				for _, s := range rep.Bad() {
					fmt.Fprintf(os.Stderr, "hecctl: shard %d (%s): %s%s\n", s.Index, s.File, s.State, note(s.Note))
				}
			}
			if err != nil {
				return err
			}
			sum := summary(e, time.Since(t0))
			if a.jsonOut() {
				return a.printJSON(struct {
					Report *ec.Report `json:"report"`
					Coding ecSummary  `json:"coding"`
				}{rep, sum})
			}
			valid := len(rep.Shards) - len(rep.Bad())
			fmt.Fprintf(a.out, "decoded %s into %s (%d bytes) from %d of %d shards\n", in, out, man.Size, valid, len(rep.Shards))
			if len(rep.Rebuilt) > 0 {
				fmt.Fprintf(a.out, "  rebuilt data shards %s from parity\n", ints(rep.Rebuilt))
				fmt.Fprintln(a.out, sum.text(man.Size))
			}
			return nil
		},
	}
	f.register(cmd, false)
	cmd.Flags().StringVar(&in, "in", "", "the directory holding manifest.json and the shards")
	cmd.Flags().StringVar(&out, "out", "", "the file to write (replaced only once the whole file is decoded)")
	return uses(cmd, useAgent|useOutput)
}

func note(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func ints(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

func ecVerifyCmd(a *app) *cobra.Command {
	var in string
	cmd := &cobra.Command{
		Use:   "verify --in DIR",
		Short: "check every shard in DIR (size, CRC-32C) and that the parity matches the data",
		Args:  wantArgs(0, 0, "no arguments (--in DIR)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if in == "" {
				return usageError{errors.New("ec verify: --in DIR is required")}
			}
			rep, err := ec.VerifyDir(cmd.Context(), nil, in)
			if err != nil {
				return err
			}
			bad := rep.Bad()
			if a.jsonOut() {
				if err := a.printJSON(rep); err != nil {
					return err
				}
			} else {
				m := rep.Manifest
				fmt.Fprintf(a.out, "%s: %d data + %d parity shards of %d bytes, %d bytes in all\n", in, m.DataShards, m.ParityShards, m.ShardSize, m.Size)
				for _, s := range rep.Shards {
					fmt.Fprintf(a.out, "  %3d %-10s %s%s\n", s.Index, s.File, s.State, note(s.Note))
				}
				switch {
				case len(bad) > 0 && len(rep.Shards)-len(bad) >= m.DataShards:
					fmt.Fprintf(a.out, "%d bad shards; %d valid remain, %d needed: hecctl ec decode still rebuilds the file\n", len(bad), len(rep.Shards)-len(bad), m.DataShards)
				case len(bad) > 0:
					fmt.Fprintf(a.out, "%d bad shards; %d valid remain, %d needed: the file cannot be rebuilt\n", len(bad), len(rep.Shards)-len(bad), m.DataShards)
				case rep.ParityOK:
					fmt.Fprintln(a.out, "every shard valid; the parity matches the data")
				default:
					fmt.Fprintln(a.out, "every shard matches its CRC, but the parity does not match the data: the shards were not coded together")
				}
			}
			if len(bad) > 0 || !rep.ParityOK {
				return fmt.Errorf("ec verify %s: %d bad shards, parity %s", in, len(bad), map[bool]string{true: "matches", false: "not checked or does not match"}[rep.ParityOK])
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&in, "in", "", "the directory holding manifest.json and the shards")
	return uses(cmd, useOutput)
}

func ecPlanCmd(a *app) *cobra.Command {
	var f ecFlags
	var size string
	cmd := &cobra.Command{
		Use:   "plan --size N",
		Short: "how a stripe of N bytes would be split between this host and the agent, and why (calibrates both first)",
		Args:  wantArgs(0, 0, "no arguments (--size N)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := humanize.ParseBytes(size)
			if err != nil || n == 0 || n > 1<<50 {
				return usageError{fmt.Errorf("--size %q: want a size such as 64MiB or 1000000", size)}
			}
			ctx := cmd.Context()
			e, done, err := a.coder(ctx, f)
			if err != nil {
				return err
			}
			defer done()
			w := int(ec.ShardSize(int64(n), f.k))
			if f.rails != host.RailsAuto {
				if a.jsonOut() {
					return a.printJSON(map[string]any{"size": n, "data_shards": f.k, "parity_shards": f.m, "shard_size": w, "rails": f.rails})
				}
				fmt.Fprintf(a.out, "%s in %d+%d shards of %d bytes: all of it on %s (--rails %s)\n", humanize.IBytes(n), f.k, f.m, w, f.rails, f.rails)
				return nil
			}
			if _, err := e.Calibrate(ctx, true); err != nil {
				return err
			}
			// A stripe in memory is one op; a file streams through the
			// window in rounds, each split on its own.
			whole, err := e.Plan(ctx, w)
			if err != nil {
				return err
			}
			round := min(w, e.Chunk())
			perRound, err := e.Plan(ctx, round)
			if err != nil {
				return err
			}
			model := e.Model()
			if a.jsonOut() {
				return a.printJSON(map[string]any{"size": n, "data_shards": f.k, "parity_shards": f.m, "shard_size": w,
					"plan": whole, "round_columns": round, "round_plan": perRound, "model": model})
			}
			fmt.Fprintf(a.out, "%s in %d+%d shards of %d bytes (the host rail's kernels: %s)\n", humanize.IBytes(n), f.k, f.m, w, e.SIMD())
			for _, r := range model {
				fmt.Fprintf(a.out, "  model %-5s %s/s after a fixed %v\n", r.Name, humanize.IBytes(uint64(r.Rate)), r.Alpha.Round(time.Microsecond))
			}
			fmt.Fprintln(a.out, "a stripe in memory, one op:")
			fmt.Fprint(a.out, indent(whole.Explain()))
			if round < w {
				fmt.Fprintf(a.out, "a file (hecctl ec encode), in rounds of %d columns that fit the window, each:\n", round)
				fmt.Fprint(a.out, indent(perRound.Explain()))
			}
			return nil
		},
	}
	f.register(cmd, true)
	cmd.Flags().StringVar(&size, "size", "", "the object's size (64MiB, 1GB, 1000000)")
	return uses(cmd, useAgent|useOutput)
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ") + "\n"
}
