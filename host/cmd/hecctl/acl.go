package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hecsys/hec/shared/api"
)

func aclCmd(a *app) *cobra.Command {
	acl := groupCmd("acl", "the XDP allow-list of source prefixes on the service ports: add, del, list")
	var deny bool
	add := &cobra.Command{Use: "add PREFIX", Short: "allow (or with --deny, deny) a source prefix (ADDR/BITS or ADDR)", Args: wantArgs(1, 1, "one PREFIX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.client().ACLAdd(cmd.Context(), api.ACLRule{Prefix: args[0], Allow: !deny}); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "%s %s\n", map[bool]string{true: "deny", false: "allow"}[deny], args[0])
			return nil
		}}
	add.Flags().BoolVar(&deny, "deny", false, "deny the prefix (default: allow it)")
	del := &cobra.Command{Use: "del PREFIX", Short: "remove the rule for PREFIX", Args: wantArgs(1, 1, "one PREFIX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.client().ACLDel(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "removed %s\n", args[0])
			return nil
		}}
	list := &cobra.Command{Use: "list", Short: "the rules, and what happens to other sources", Args: wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			doc, err := a.client().ACL(cmd.Context())
			if err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(doc)
			}
			tw := tabwriter.NewWriter(a.out, 2, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "PREFIX\tACTION")
			for _, r := range doc.Rules {
				fmt.Fprintf(tw, "%s\t%s\n", r.Prefix, map[bool]string{true: "allow", false: "deny"}[r.Allow])
			}
			fmt.Fprintf(tw, "(others)\t%s\n", map[bool]string{true: "deny", false: "allow"}[doc.DefaultDeny])
			return tw.Flush()
		}}
	acl.AddCommand(uses(add, useAgent|useMgmt), uses(del, useAgent|useMgmt), uses(list, useAgent|useMgmt|useOutput))
	return acl
}
