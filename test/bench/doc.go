// Command bench is the program behind `make bench`: it runs each scenario
// side by side with its peer or floor on this machine, in one run, and writes
// the figures as JSON and as a markdown table (bench-out/results.json and
// bench-out/results.md), then prints the table.
//
// Scenarios that need a second process run this same binary again with the
// first argument "child"; the two are pinned to different cores where there
// are two. Targets are reported as ratios against the peer from the same run,
// never as absolute times, and a missed target is reported, not fatal: these
// machines are noisy.
//
// Usage:
//
//	go run ./test/bench [-out DIR] [-run REGEXP] [-quick]
package main
