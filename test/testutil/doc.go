// Package testutil is what the project's tests share: the binaries built
// once per test process (Hecd, Hecctl), waiting for a condition (WaitFor),
// free loopback ports, and a skip for tests that need root.
package testutil
