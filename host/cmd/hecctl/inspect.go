package main

import (
	"bufio"
	"context"
	"flag"
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

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/api"
)

func getXDP(ctx context.Context, mgmt string, top int) (api.XDPStatus, error) {
	return host.NewMgmt(mgmt).XDP(ctx, top)
}

func inspectCmd(ctx context.Context, args []string, out io.Writer) error {
	var c common
	fs := flags("inspect", &c)
	interval := fs.Duration("interval", time.Second, "time between reports")
	count := fs.Int("count", 0, "reports to print (0: until interrupted)")
	top := fs.Int("top", 5, "top talkers to show")
	pcap := fs.String("pcap", "", "write sampled packets to this pcap file instead (tshark -r FILE reads it)")
	seconds := fs.Float64("seconds", 5, "with --pcap: how long to sample")
	every := fs.Uint("every", 1, "with --pcap: sample one packet in this many")
	snap := fs.Uint("snap", 128, "with --pcap: bytes of each packet (at most 256)")
	limit := fs.Uint("max", 0, "with --pcap: stop after this many packets (0: no limit)")
	classes := fs.String("classes", "default", "with --pcap: classes to sample, comma-separated (resp, udp_get, peer, mgmt, other), all, or default (all but mgmt, which carries the samples)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *pcap != "" {
		return inspectPcap(ctx, c.mgmt, *pcap, *seconds, *every, *snap, *limit, *classes, out)
	}
	if *interval <= 0 {
		return fmt.Errorf("inspect: --interval must be positive")
	}
	prev, err := getXDP(ctx, c.mgmt, *top)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "xdp on %s (%s mode), allow-list default %s\n", prev.Interface, prev.Mode,
		map[bool]string{true: "deny", false: "allow"}[prev.DefaultDeny])
	t0 := time.Now()
	for n := 0; *count == 0 || n < *count; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*interval):
		}
		cur, err := getXDP(ctx, c.mgmt, *top)
		if err != nil {
			return err
		}
		dt := time.Since(t0).Seconds()
		t0 = time.Now()
		printRates(out, prev, cur, dt)
		prev = cur
	}
	return nil
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
func inspectPcap(ctx context.Context, mgmt, path string, seconds float64, every, snap, limit uint, classes string, out io.Writer) error {
	if snap == 0 || snap > 256 || every == 0 || seconds <= 0 {
		return fmt.Errorf("inspect: want --snap 1..256, --every >= 1, --seconds > 0")
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
	err = host.NewMgmt(mgmt).Samples(ctx, q, func(s api.XDPSample) bool {
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

func aclCmd(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("acl: want add PREFIX [--deny] | del PREFIX | list")
	}
	var c common
	fs := flags("acl "+args[0], &c)
	deny := fs.Bool("deny", false, "with add: deny the prefix (default: allow it)")
	sub := args[0]
	pos, err := parseAnywhere(fs, args[1:])
	if err != nil {
		return err
	}
	switch sub {
	case "add":
		if len(pos) != 1 {
			return fmt.Errorf("acl add: want one PREFIX (ADDR/BITS or ADDR)")
		}
		if err := host.NewMgmt(c.mgmt).ACLAdd(ctx, api.ACLRule{Prefix: pos[0], Allow: !*deny}); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s %s\n", map[bool]string{true: "deny", false: "allow"}[*deny], pos[0])
		return nil
	case "del":
		if len(pos) != 1 {
			return fmt.Errorf("acl del: want one PREFIX")
		}
		if err := host.NewMgmt(c.mgmt).ACLDel(ctx, pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(out, "removed %s\n", pos[0])
		return nil
	case "list":
		if len(pos) != 0 {
			return fmt.Errorf("acl list: takes no arguments")
		}
		doc, err := host.NewMgmt(c.mgmt).ACL(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "PREFIX\tACTION")
		for _, r := range doc.Rules {
			fmt.Fprintf(tw, "%s\t%s\n", r.Prefix, map[bool]string{true: "allow", false: "deny"}[r.Allow])
		}
		fmt.Fprintf(tw, "(others)\t%s\n", map[bool]string{true: "deny", false: "allow"}[doc.DefaultDeny])
		return tw.Flush()
	}
	return fmt.Errorf("acl: unknown subcommand %q: want add, del or list", sub)
}

// parseAnywhere parses flags given before, between or after the
// positional arguments, which it returns.
func parseAnywhere(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
