// Package shared holds the contract between the host and the DPU agent.
//
// Nothing here knows about the agent or the services. Its sub-packages are:
//
//   - wire: descriptor and frame formats, op and status codes.
//   - ring: the shared-memory region, its leased queue pairs and rings, the
//     arena windows, the span accessor and the adaptive waiter.
//   - crc32c: CRC-32C and the combination of partial CRCs.
//   - rail: the rail model and the planner that splits work across rails.
//
// Everything below shared/ imports only the standard library and
// golang.org/x/sys; a test in the repository root enforces it.
package shared
