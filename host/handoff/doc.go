// Package handoff is the seam between the host library (package host)
// and the transports that carry its ops to an agent: shared memory
// (package shm: a queue pair of the agent's region, its window mapped in
// this process), TCP (package tcp: descriptors and payloads inline on a
// stream) and RDMA (package rdma: the window is registered memory the
// agent reads and writes).
//
// An op is a Call: its Request, and what the transport records of it on
// the way (its tag, the staging buffers it took, where its outputs lie).
// A Transport takes batches of calls (Submit), completes each exactly
// once (Call.Complete), and waits for one (Wait) with the policy its
// medium wants. What the transports with a window share (a buffer's
// place in it, descriptors naming buffers in place and staging the rest,
// outputs copied back) is here too.
//
// Package host picks a transport by the target's scheme from one table
// (host's transports): a new transport is a package implementing
// Transport and a line there.
package handoff
