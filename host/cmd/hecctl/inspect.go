package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/spf13/cobra"

	"github.com/hecsys/hec/shared/api"
)

func inspectCmd(a *app) *cobra.Command {
	var o struct {
		interval         durationFlag
		count, top       int
		pcap, classes    string
		seconds          float64
		every, snap, max uint
	}
	o.interval.d = time.Second
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "the agent's XDP counters: per-class rates, drops by reason, top talkers; --pcap FILE writes sampled packets",
		Args:  wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if o.pcap != "" {
				return a.inspectPcap(ctx, o.pcap, o.seconds, o.every, o.snap, o.max, o.classes)
			}
			if o.interval.d <= 0 {
				return usageError{fmt.Errorf("--interval must be positive")}
			}
			m := a.client()
			prev, err := m.XDP(ctx, o.top)
			if err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(prev)
			}
			fmt.Fprintf(a.out, "xdp on %s (%s mode), allow-list default %s\n", prev.Interface, prev.Mode,
				map[bool]string{true: "deny", false: "allow"}[prev.DefaultDeny])
			t0 := time.Now()
			for n := 0; o.count == 0 || n < o.count; n++ {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(o.interval.d):
				}
				cur, err := m.XDP(ctx, o.top)
				if err != nil {
					return err
				}
				dt := time.Since(t0).Seconds()
				t0 = time.Now()
				printRates(a.out, prev, cur, dt)
				prev = cur
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Var(&o.interval, "interval", "time between reports")
	f.IntVar(&o.count, "count", 0, "reports to print (0: until interrupted)")
	f.IntVar(&o.top, "top", 5, "top talkers to show")
	f.StringVar(&o.pcap, "pcap", "", "write sampled packets to this pcap file instead (tshark -r FILE reads it)")
	f.Float64Var(&o.seconds, "seconds", 5, "with --pcap: how long to sample")
	f.UintVar(&o.every, "every", 1, "with --pcap: sample one packet in this many")
	f.UintVar(&o.snap, "snap", 128, "with --pcap: bytes of each packet (at most 256)")
	f.UintVar(&o.max, "max", 0, "with --pcap: stop after this many packets (0: no limit)")
	f.StringVar(&o.classes, "classes", "default", "with --pcap: classes to sample, comma-separated (resp, udp_get, peer, mgmt, other), all, or default (all but mgmt, which carries the samples)")
	return uses(cmd, useAgent|useMgmt|useOutput)
}

func printRates(out io.Writer, prev, cur api.XDPStatus, dt float64) {
	rate := func(a, b uint64) float64 {
		if b < a { // the agent restarted without its pins
			return float64(b) / dt
		}
		return float64(b-a) / dt
	}
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tclass\tpkt/s\tMbit/s\tpassed/s\tanswered/s\tdropped/s\t\n", time.Now().Format("15:04:05"))
	for i, c := range cur.Classes {
		var p = c
		if i < len(prev.Classes) {
			p = prev.Classes[i]
		} else {
			p.Packets, p.Bytes, p.Passed, p.Answered, p.Dropped = 0, 0, 0, 0, nil
		}
		var drops []string
		var dsum float64
		for _, r := range slices.Sorted(maps.Keys(c.Dropped)) {
			d := rate(p.Dropped[r], c.Dropped[r])
			dsum += d
			if d > 0 {
				drops = append(drops, fmt.Sprintf("%s %.0f", r, d))
			}
		}
		ds := fmt.Sprintf("%.0f", dsum)
		if len(drops) > 0 {
			ds += " (" + strings.Join(drops, ", ") + ")"
		}
		fmt.Fprintf(tw, "\t%s\t%.0f\t%.2f\t%.0f\t%.0f\t%s\t\n", c.Class, rate(p.Packets, c.Packets),
			rate(p.Bytes, c.Bytes)*8/1e6, rate(p.Passed, c.Passed), rate(p.Answered, c.Answered), ds)
	}
	tw.Flush()
	var total []string
	for _, r := range slices.Sorted(maps.Keys(cur.Drops)) {
		total = append(total, fmt.Sprintf("%s %d", r, cur.Drops[r]))
	}
	fmt.Fprintf(out, "  drops since loaded: %s\n", strings.Join(total, ", "))
	if cur.Hot != nil {
		fmt.Fprintf(out, "  hot keys: %d held, %d served in XDP, %d invalidated by writes\n", cur.Hot.Held, cur.Hot.Served, cur.Hot.Invalidations)
	}
	if len(cur.Talkers) > 0 {
		fmt.Fprintf(out, "  top talkers:")
		for _, t := range cur.Talkers {
			fmt.Fprintf(out, "  %s %d pkts %s", t.Addr, t.Packets, sizeOf(t.Bytes))
		}
		fmt.Fprintln(out)
	}
}

func sizeOf(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

// inspectPcap streams the agent's packet samples into a pcap file.
func (a *app) inspectPcap(ctx context.Context, path string, seconds float64, every, snap, limit uint, classes string) error {
	out := a.out
	if snap == 0 || snap > 256 || every == 0 || seconds <= 0 {
		return usageError{fmt.Errorf("inspect: want --snap 1..256, --every >= 1, --seconds > 0")}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	w := pcapgo.NewWriter(bw)
	if err := w.WriteFileHeader(uint32(snap), layers.LinkTypeEthernet); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	n := 0
	got := map[string]int{}
	var werr error
	q := api.SampleQuery{Every: every, Snap: snap, Max: limit, Seconds: seconds, Classes: classes}
	err = a.client().Samples(ctx, q, func(s api.XDPSample) bool {
		if len(s.Data) > int(snap) || len(s.Data) > s.Len {
			return true // not what was asked: never write a malformed record
		}
		ci := gopacket.CaptureInfo{Timestamp: s.Time, CaptureLength: len(s.Data), Length: s.Len}
		if werr = w.WritePacket(ci, s.Data); werr != nil {
			return false
		}
		n++
		got[s.Class+"/"+s.Verdict]++
		return true
	})
	if werr != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, werr)
	}
	if err != nil {
		if n == 0 {
			f.Close()
			os.Remove(path)
			return err
		}
		fmt.Fprintf(out, "inspect: samples stream ended: %v\n", err)
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(got)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, got[k]))
	}
	fmt.Fprintf(out, "wrote %d packets to %s (%s)\n", n, path, strings.Join(parts, ", "))
	return nil
}
