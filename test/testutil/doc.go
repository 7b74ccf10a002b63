// Package testutil is what the project's tests share: the binaries built
// once per test process (Hecd, Hecctl) in a directory of the process's own
// (ProcessDir) that Main, called from a package's TestMain, removes when
// its tests end; waiting for a condition (WaitFor), free loopback ports,
// and a skip for tests that need root.
package testutil
