// Package bench is what `hecctl coll bench` reports: one Row per rail and
// size, as rank 0 prints it (JSON lines) and the command prints it (a
// table, or JSON with -o json). The CLI and test/bench, which reads the
// command's rows, share this one definition, so that a renamed field
// breaks the build rather than a figure.
package bench
