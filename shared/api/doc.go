// Package api is the agent's management API as data: the JSON bodies of
// every /v1/* endpoint, and the well-known addresses and paths that hecd
// serves on by default and that clients (hecctl, the host library, the
// bench, test clusters, the QEMU harness) look for with no flags.
//
// It is the one description of the API: the agent (package dpu) encodes
// these types, host.Mgmt decodes them, and nothing mirrors them. It uses
// the standard library only (and shared/sysinfo's data types), so a client
// in any layer may import it.
package api
