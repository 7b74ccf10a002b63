// Package host is the library applications link to hand work to a HEC agent
// (hecd) on the DPU, or on this host in local emulation.
//
//	c, err := host.Dial(ctx, "shm:///dev/shm/hec0") // or "tcp://127.0.0.1:7610"
//	buf, err := c.Alloc(1 << 20)                    // in the shared window: zero copy
//	crc, err := c.Checksum(ctx, buf)
//
// # Buffers and copies
//
// Over shared memory (shm://) every queue pair has a window of the region.
// A buffer from Alloc lives in that window and is handed to the agent with
// zero copy. Any other memory given to an op is copied into the window once
// (in chunks, through a staging buffer), so it works, at the cost of a copy.
// Over TCP (tcp://) payloads travel inline and Alloc returns ordinary
// memory.
//
// A buffer handed to an op must not be modified until the op completes.
//
// # Transports
//
// Dial picks the transport by the target's scheme (shm://, tcp://,
// rdma://); each is a package of its own behind handoff.Transport
// (host/handoff/shm, tcp, rdma), held to one contract
// (test/handofftest). Request, Result and Call are handoff's.
//
// # Calls
//
// Do runs one op synchronously; Go submits one asynchronously and GoBatch
// several with a single ring doorbell, each returning a *Call to Wait on. A
// Client is safe for use by many goroutines.
//
// # Failures and restarts
//
// When the agent restarts (a crash, an update), stops, or fences this
// process's queue pair, ops in flight fail with a retryable status
// (wire.IsRetryable reports true: wire.StatusRestarted,
// wire.StatusUnavailable, wire.StatusFenced). The client attaches again on
// its own; later ops wait for that (bounded by their context) and succeed.
// It prefers the queue pair it had, so buffers from Alloc stay valid across
// an agent restart.
//
// # Chunking
//
// Ops on buffers larger than one op may carry are split: Checksum splits
// into chunks checksummed concurrently by the agent's workers and combines
// the partial CRCs exactly.
//
// # Erasure coding
//
// EC codes stripes on the host rail, the agent's, or both at once (split
// by columns so both finish together). Its Put, Get, Stat, List and Delete
// keep objects across agents: the local agent codes each object and places
// its shards on k+m agents over the peer layer (package ec/object);
// NewClientSideObjects is the same done in this process, the baseline
// the bench measures it against.
package host
