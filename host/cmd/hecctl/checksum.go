package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/hecsys/hec/shared/crc32c"
	"github.com/hecsys/hec/shared/rail"
)

func checksumCmd(a *app) *cobra.Command {
	var verify bool
	var rails, objective string
	cmd := &cobra.Command{
		Use:   "checksum FILE",
		Short: "CRC-32C of FILE computed by the agent (--verify compares in-process; --rails auto splits it with this host)",
		Args:  wantArgs(1, 1, "one FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			obj, err := rail.ParseObjective(objective)
			if err != nil {
				return usageError{err}
			}
			if rails == rail.Auto {
				return a.checksumRails(cmd.Context(), args[0], obj)
			}
			return a.checksum(cmd.Context(), args[0], verify)
		},
	}
	cmd.Flags().BoolVar(&verify, "verify", false, "also compute the CRC in-process and compare")
	railFlag(cmd.Flags(), &rails, rail.DPU, []string{rail.DPU, rail.Auto}, "dpu: the agent alone; auto: split between this host's CPU and the agent by the planner")
	cmd.Flags().StringVar(&objective, "objective", "time", "what auto plans for: time, or host-cpu (the least host CPU within 1.1× of the fastest)")
	return uses(cmd, useAgent|useMgmt)
}

func (a *app) checksum(ctx context.Context, path string, verify bool) error {
	out := a.out
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	cl, err := a.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	// Read the file straight into buffers the agent reads in place.
	const chunk = 1 << 20
	buf, err := cl.Alloc(chunk)
	if err != nil {
		return err
	}
	defer cl.Free(buf)
	var crc, local uint32
	var total int64
	var agentTime time.Duration
	bar := transferBar(f, "checksum "+path)
	defer bar.Finish()
	for {
		n, rerr := io.ReadFull(f, buf)
		bar.Add(n)
		if n > 0 {
			t0 := time.Now()
			part, err := cl.Checksum(ctx, buf[:n])
			agentTime += time.Since(t0)
			if err != nil {
				return err
			}
			crc = crc32c.Combine(crc, part, int64(n))
			if verify {
				local = crc32c.Update(local, buf[:n])
			}
			total += int64(n)
		}
		if rerr == io.EOF || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	fmt.Fprintf(out, "%08x  %s  (%d bytes, crc32c by the agent over %s, %.2f GB/s in the agent's hands)\n",
		crc, path, total, cl, float64(total)/agentTime.Seconds()/1e9)
	if verify {
		if local != crc {
			return fmt.Errorf("MISMATCH: in-process crc32c %08x", local)
		}
		fmt.Fprintf(out, "%08x  in-process: match\n", local)
	}
	return nil
}

// checksumRails reads FILE, calibrates the host and agent rails, and lets
// the planner split the checksum between them; it prints the plan, the time
// achieved, and the single-rail answer to compare.
func (a *app) checksumRails(ctx context.Context, path string, obj rail.Objective) error {
	out := a.out
	cl, err := a.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	// Read the file into the window when it fits (the agent then reads it
	// in place), else into memory (staged to the agent in chunks).
	var data []byte
	where := "in the window"
	if buf, err := cl.Alloc(int(fi.Size())); err == nil && fi.Size() > 0 {
		defer cl.Free(buf)
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		_, err = io.ReadFull(f, buf)
		f.Close()
		if err != nil {
			return err
		}
		data = buf
	} else if data, err = os.ReadFile(path); err != nil {
		return err
	} else {
		where = "staged through the window"
	}
	rails, err := cl.CalibrateChecksum(ctx, data)
	if err != nil {
		return err
	}
	t0 := time.Now()
	crc, d, err := cl.ChecksumAutoFor(ctx, data, rails, obj)
	took := time.Since(t0)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "rails (calibrated now, on this file %s):\n", where)
	for _, r := range rails {
		fmt.Fprintf(out, "  %-5s %-10s alpha %-10v %.2f GB/s\n", r.Name, r.Kind, r.Alpha.Round(time.Nanosecond), r.Rate/1e9)
	}
	fmt.Fprintf(out, "plan: %s", d.Plan.Explain())
	fmt.Fprintf(out, "chose %s: %s\n", d.Choice, d.Reason)
	fmt.Fprintf(out, "%08x  %s  (%d bytes in %v on %s; predicted %v)\n", crc, path, len(data), took.Round(time.Microsecond), d.Choice, d.Predicted.Round(time.Microsecond))
	if want := crc32c.Checksum(data); want != crc {
		return fmt.Errorf("MISMATCH: single-rail crc32c %08x", want)
	}
	fmt.Fprintf(out, "%08x  single rail (in-process): match\n", crc)
	return nil
}
