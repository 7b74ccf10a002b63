// Command badagent stands for a broken agent in the flashing tests: built
// with -ldflags "-X main.mode=exit" it exits at start, with "hang" it runs
// but never serves anything, and with "node" (and -X main.failNode=N
// -X main.agent=PATH) it is an agent that breaks on one node only: it
// exits at start when its --node-id is N and runs the agent at PATH, with
// its arguments, anywhere else.
package main

import (
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"
)

var mode, failNode, agent = "exit", "", ""

func main() {
	switch mode {
	case "exit":
		fmt.Fprintln(os.Stderr, "badagent: exiting at start")
		os.Exit(3)
	case "node":
		if i := slices.Index(os.Args, "--node-id"); i >= 0 && i+1 < len(os.Args) && os.Args[i+1] == failNode {
			fmt.Fprintf(os.Stderr, "badagent: node %s: exiting at start\n", failNode)
			os.Exit(3)
		}
		err := syscall.Exec(agent, append([]string{agent}, os.Args[1:]...), os.Environ())
		fmt.Fprintln(os.Stderr, "badagent:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "badagent: running, serving nothing")
	time.Sleep(time.Hour)
}
