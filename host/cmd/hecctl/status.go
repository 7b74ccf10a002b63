package main

import (
	"bufio"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hecsys/hec/shared/api"
)

func statusCmd(a *app) *cobra.Command {
	return uses(&cobra.Command{
		Use:   "status",
		Short: "the agent's version, generation, services, queue pairs and op counts",
		Args:  wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := a.client().Status(cmd.Context())
			if err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(st)
			}
			out := a.out
			fmt.Fprintf(out, "agent    hecd %s, pid %d, up %s, generation %d\n", st.Version, st.PID,
				(time.Duration(st.UptimeSec) * time.Second).String(), st.Generation)
			fmt.Fprintf(out, "reach    --agent %s --mgmt %s\n", a.agent, a.mgmt)
			if st.Region != "" {
				fmt.Fprintf(out, "region   %s, %d MiB, window %d KiB per queue pair\n", st.Region, st.RegionSize>>20, st.WindowSize>>10)
			}
			fmt.Fprintf(out, "state    %s\n", st.StateDir)
			fmt.Fprintf(out, "access   %s\n", accessLine(st.Access))
			if u := st.Update; u != nil {
				fmt.Fprintf(out, "slots    running %s (%s), committed %s, floor %s", u.Slot, st.Version, u.Committed, orDash(u.Floor))
				if u.Machine != "" {
					fmt.Fprintf(out, "; boots the machine in slot %s (%s)", u.Machine, u.Versions[u.Machine])
				}
				if l := u.Last; l != nil {
					fmt.Fprintf(out, "; last update %s %s", l.Version, l.Result)
					if l.Reason != "" {
						fmt.Fprintf(out, " (%s)", l.Reason)
					}
				}
				fmt.Fprintln(out)
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "\nSERVICE\tADDRESS\tSERVED\tNOTE")
			for _, s := range st.Services {
				served := "yes"
				if !s.Served {
					served = "NO"
				}
				if s.Stopped != "" {
					served = "STOPPED: " + s.Stopped
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.Addr, served, s.Note)
			}
			active := 0
			fmt.Fprintln(tw, "\nQUEUE PAIR\tSTATE\tHOLDER PID\tIN FLIGHT\tFAULTS/FENCES\tREASON")
			for _, q := range st.QueuePairs {
				if q.State == "free" && q.Faults == 0 && q.Fences == 0 {
					continue
				}
				active++
				fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d/%d\t%s\n", q.Index, q.State, q.PID, q.InFlight, q.Faults, q.Fences, q.Reason)
			}
			fmt.Fprintf(tw, "(%d of %d queue pairs shown; the rest are free and untouched)\n", active, len(st.QueuePairs))
			fmt.Fprintln(tw, "\nOP\tCOUNT\tERRORS")
			for _, o := range st.Ops {
				fmt.Fprintf(tw, "%s\t%d\t%d\n", o.Op, o.Count, o.Errors)
			}
			return tw.Flush()
		},
	}, useAgent|useMgmt|useOutput)
}

func metricsCmd(a *app) *cobra.Command {
	return uses(&cobra.Command{
		Use:   "metrics",
		Short: "the agent's hec_* Prometheus series",
		Args:  wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			text, err := a.client().Metrics(cmd.Context())
			if err != nil {
				return err
			}
			s := bufio.NewScanner(strings.NewReader(text))
			for s.Scan() {
				if l := s.Text(); strings.HasPrefix(l, "hec_") && !strings.Contains(l, "_bucket{") {
					fmt.Fprintln(a.out, l)
				}
			}
			return s.Err()
		},
	}, useAgent|useMgmt)
}

// accessLine says who may talk to the agent, in a line.
func accessLine(ac api.Access) string {
	var parts []string
	switch {
	case ac.Token && ac.MgmtClientCerts:
		parts = append(parts, "token ("+ac.TokenFile+") or a client certificate")
	case ac.Token:
		parts = append(parts, "token ("+ac.TokenFile+")")
	case ac.MgmtClientCerts:
		parts = append(parts, "a client certificate (management)")
	default:
		parts = append(parts, "no credentials (listeners on loopback)")
	}
	if ac.MgmtTLS {
		parts = append(parts, "management over HTTPS")
	}
	if len(ac.MgmtOpen) > 0 {
		parts = append(parts, "open without it: "+strings.Join(ac.MgmtOpen, ", "))
	}
	if len(ac.Insecure) > 0 {
		parts = append(parts, "INSECURE beyond loopback: "+strings.Join(ac.Insecure, ", "))
	}
	return strings.Join(parts, "; ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
