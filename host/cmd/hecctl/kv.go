package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/hecsys/hec/host"
)

func kvCmd(a *app) *cobra.Command {
	kv := groupCmd("kv", "the agent's key-value store over the handoff: get, put, del, scan")
	get := &cobra.Command{Use: "get KEY", Short: "print KEY's value", Args: wantArgs(1, 1, "KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer cl.Close()
			v, _, err := cl.KV().Get(cmd.Context(), []byte(args[0]), nil)
			if host.IsNotFound(err) {
				return fmt.Errorf("%s: not found", args[0])
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.out, "%s\n", v)
			return nil
		}}
	var ttl durationFlag
	put := &cobra.Command{Use: "put KEY VALUE", Short: "set KEY to VALUE (--ttl D: expire after D)", Args: wantArgs(2, 2, "KEY VALUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer cl.Close()
			if err := cl.KV().Put(cmd.Context(), []byte(args[0]), []byte(args[1]), host.PutOptions{TTL: ttl.d}); err != nil {
				return err
			}
			fmt.Fprintln(a.out, "OK")
			return nil
		}}
	put.Flags().Var(&ttl, "ttl", "expire after this long (1h, 30s)")
	del := &cobra.Command{Use: "del KEY", Short: "delete KEY", Args: wantArgs(1, 1, "KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer cl.Close()
			ok, err := cl.KV().Delete(cmd.Context(), []byte(args[0]))
			if err != nil {
				return err
			}
			fmt.Fprintln(a.out, map[bool]string{true: "deleted", false: "not found"}[ok])
			return nil
		}}
	var limit int
	scan := &cobra.Command{Use: "scan [PREFIX]", Short: "list keys and values, in key order", Args: wantArgs(0, 1, "at most a PREFIX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			cl, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer cl.Close()
			type pair struct {
				Key   string `json:"key"`
				Value string `json:"value"`
			}
			all := []pair{}
			var cursor []byte
			for len(all) < limit {
				pairs, next, err := cl.KV().Scan(cmd.Context(), []byte(prefix), cursor, min(limit-len(all), 1000))
				if err != nil {
					return err
				}
				for _, p := range pairs {
					all = append(all, pair{string(p.Key), string(p.Value)})
				}
				if next == nil {
					break
				}
				cursor = next
			}
			if a.jsonOut() {
				return a.printJSON(all)
			}
			for _, p := range all {
				fmt.Fprintf(a.out, "%s\t%s\n", p.Key, p.Value)
			}
			return nil
		}}
	scan.Flags().IntVar(&limit, "limit", 100, "the most pairs to list")
	for _, c := range []*cobra.Command{get, put, del} {
		kv.AddCommand(uses(c, useAgent|useMgmt))
	}
	kv.AddCommand(uses(scan, useAgent|useMgmt|useOutput))
	return kv
}
