package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
)

// pingResult is what ping prints with -o json.
type pingResult struct {
	Agent     string  `json:"agent"`
	Transport string  `json:"transport"`
	N         int     `json:"round_trips"`
	P50Ns     float64 `json:"p50_ns"`
	P90Ns     float64 `json:"p90_ns"`
	P99Ns     float64 `json:"p99_ns"`
}

func pingCmd(a *app) *cobra.Command {
	var n int
	cmd := &cobra.Command{
		Use:   "ping",
		Short: "round trips through the agent's handoff; p50, p90, p99",
		Args:  wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n < 1 {
				return usageError{fmt.Errorf("--n %d: want at least 1", n)}
			}
			ctx := cmd.Context()
			cl, err := a.dial(ctx)
			if err != nil {
				return err
			}
			defer cl.Close()
			// A few warm-up round trips, then n measured.
			for i := 0; i < min(n, 100); i++ {
				if err := cl.Ping(ctx); err != nil {
					return err
				}
			}
			d := make([]time.Duration, n)
			for i := range d {
				t0 := time.Now()
				if err := cl.Ping(ctx); err != nil {
					return err
				}
				d[i] = time.Since(t0)
			}
			slices.Sort(d)
			p := func(q float64) time.Duration { return d[int(q*float64(n-1))] }
			if a.jsonOut() {
				return a.printJSON(pingResult{Agent: a.agent, Transport: cl.String(), N: n,
					P50Ns: float64(p(0.5)), P90Ns: float64(p(0.9)), P99Ns: float64(p(0.99))})
			}
			fmt.Fprintf(a.out, "ping %s: %d round trips: p50 %v  p90 %v  p99 %v\n", cl, n, p(0.5), p(0.9), p(0.99))
			return nil
		},
	}
	cmd.Flags().IntVar(&n, "n", 1000, "round trips to time")
	return uses(cmd, useAgent|useMgmt|useOutput)
}
