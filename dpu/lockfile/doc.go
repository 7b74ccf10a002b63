// Package lockfile takes an exclusive lock on a file without waiting, and
// names the process that holds it when it cannot: how an agent keeps a
// state directory or a region to itself, and says which agent has it.
package lockfile
