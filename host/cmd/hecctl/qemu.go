package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/hecsys/hec/qemu"
)

func qemuCmd(a *app) *cobra.Command {
	q := groupCmd("qemu", "boot the arm64 image in QEMU (make image first): up, down, status, console")
	var name string
	q.PersistentFlags().StringVar(&name, "name", "hec-vm", "VM name (state in "+qemu.StateRoot()+"/NAME)")
	var bundle string
	var ports int
	var ready time.Duration
	up := &cobra.Command{Use: "up", Short: "boot a VM; prints how to reach every service", Args: wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(a.out, "booting VM %s (QEMU arm64, TCG) ...\n", name)
			vm, err := qemu.Up(cmd.Context(), qemu.Options{Name: name, Bundle: bundle, PortBase: ports, ReadyTimeout: ready, Progress: a.out})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.out, "VM %s up in %v (pid %d); console: %s\n", vm.Name, vm.BootTime.Round(time.Millisecond), vm.PID, vm.Console)
			printVM(a.out, vm)
			return nil
		}}
	up.Flags().StringVar(&bundle, "bundle", "", "image bundle (default .cache/images/qemu)")
	up.Flags().IntVar(&ports, "ports", 0, "forward the management, TCP handoff, RESP and UDP GET ports from BASE..BASE+3 (default: free ones)")
	up.Flags().DurationVar(&ready, "ready-timeout", qemu.DefaultReadyTimeout, "how long the agent has to become ready (QEMU emulates the arm64 CPU: a busy machine boots slower)")
	down := &cobra.Command{Use: "down", Short: "ask the agent to power off; kill QEMU if it does not; returns once QEMU is gone",
		Args: wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			vm, err := qemu.Load(qemu.StateDirFor(name))
			if err != nil {
				return fmt.Errorf("no VM %s (%s): %w", name, qemu.StateDirFor(name), err)
			}
			if err := vm.Down(cmd.Context(), 20*time.Second); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "VM %s down\n", vm.Name)
			return nil
		}}
	status := &cobra.Command{Use: "status", Short: "whether the VM runs, and how to reach it", Args: wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			vm, err := qemu.Load(qemu.StateDirFor(name))
			if err != nil {
				return fmt.Errorf("no VM %s (%s): %w", name, qemu.StateDirFor(name), err)
			}
			state := "stopped"
			if why, ok := vm.Panic(); ok && !vm.Running() {
				state = "stopped: the guest kernel panicked (" + why + ")"
			}
			if vm.Running() {
				state = fmt.Sprintf("running (pid %d, booted in %v)", vm.PID, vm.BootTime.Round(time.Millisecond))
			}
			if a.jsonOut() {
				return a.printJSON(map[string]any{"vm": vm, "running": vm.Running(), "state": state})
			}
			fmt.Fprintf(a.out, "VM %s: %s\n", vm.Name, state)
			printVM(a.out, vm)
			return nil
		}}
	var follow bool
	console := &cobra.Command{Use: "console", Short: "the guest console (kernel and hecd logs)", Args: wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			vm, err := qemu.Load(qemu.StateDirFor(name))
			if err != nil {
				return fmt.Errorf("no VM %s (%s): %w", name, qemu.StateDirFor(name), err)
			}
			f, err := os.Open(vm.Console)
			if err != nil {
				return err
			}
			defer f.Close()
			for {
				if _, err := io.Copy(a.out, f); err != nil {
					return err
				}
				if !follow || !vm.Running() {
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(200 * time.Millisecond):
				}
			}
		}}
	console.Flags().BoolVar(&follow, "follow", false, "keep printing as it grows")
	q.AddCommand(up, down, uses(status, useOutput), console)
	return q
}

// printVM says where a VM's services are.
func printVM(out io.Writer, vm *qemu.VM) {
	fmt.Fprintf(out, "  hecctl:     --agent %s   (or --agent tcp://%s; the management address and the token follow)\n", vm.Agent, vm.TCP)
	fmt.Fprintf(out, "  token:      %s (the operator's; management, TCP handoff and RESP require it)\n", vm.TokenFile)
	fmt.Fprintf(out, "  management: http://%s (curl -H \"Authorization: Bearer $(cat %s)\" ...)\n", vm.Mgmt, vm.TokenFile)
	fmt.Fprintf(out, "  RESP:       %s (REDISCLI_AUTH=$(cat %s) redis-cli -h %s -p %s)\n  UDP GET:    %s\n  state:      %s\n",
		vm.RESP, vm.TokenFile, hostOf(vm.RESP), portOf(vm.RESP), vm.UDP, vm.StateDir)
}
