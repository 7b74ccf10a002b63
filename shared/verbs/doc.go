// Package verbs is the part of RDMA verbs (libibverbs) that HEC's RDMA
// transport needs: open a device, register memory, make reliable-connected
// queue pairs, connect them to a peer's, post sends, receives, RDMA writes
// and reads, and poll completions.
//
// The library is opened with dlopen at the first Open, not linked: hecd
// and the host library start, and serve their other transports, on a
// machine without rdma-core, and say why RDMA is absent (Available). The C
// shim (shim.c) is compiled with cgo; built without cgo (the arm64 cross
// build) or without libibverbs' headers, the package only reports that.
//
// Memory is registered once: a Region is memory this package maps
// (anonymous, page-aligned, outside the Go heap), which the device reads
// and writes by DMA while it is registered, and which a peer reaches with
// RDMA READ and WRITE through its key (Region.Key).
//
// Addresses: RoCE (soft-RoCE, rxe, included) addresses a port by GID; a
// queue pair connects to the peer's queue pair number and GID, exchanged
// out of band (Endpoint, 24 bytes). On Ethernet the GID of type RoCE v2
// for the port's IPv4 address is used.
package verbs
