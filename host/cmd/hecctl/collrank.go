package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/hecsys/hec/host/collbench"
)

// collRankCmd is one rank of coll bench, started by it (host/collbench)
// with its options as one argument.
func collRankCmd() *cobra.Command {
	return &cobra.Command{Use: "rank OPTIONS-JSON", Hidden: true, Short: "one rank of coll bench (started by it)", Args: wantArgs(1, 1, "the rank's options"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := collbench.ParseRankOptions(args[0])
			if err == nil {
				err = collbench.RunRank(cmd.Context(), o, os.Stdout)
			}
			if err != nil {
				// One line the driver shows: it names this rank.
				fmt.Fprintf(os.Stderr, "rank %d: %v\n", o.Rank, err)
				os.Exit(1)
			}
			return nil
		}}
}
