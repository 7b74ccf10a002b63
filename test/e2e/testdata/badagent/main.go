// Command badagent stands for a broken agent in the flashing tests: built
// with -ldflags "-X main.mode=exit" it exits at start, with "hang" it runs
// but never serves anything.
package main

import (
	"fmt"
	"os"
	"time"
)

var mode = "exit"

func main() {
	if mode == "exit" {
		fmt.Fprintln(os.Stderr, "badagent: exiting at start")
		os.Exit(3)
	}
	fmt.Fprintln(os.Stderr, "badagent: running, serving nothing")
	time.Sleep(time.Hour)
}
