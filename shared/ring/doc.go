// Package ring is the shared-memory region between host processes and the
// agent: a header, a table of leased queue pairs, their submission and
// completion rings, and the buffer arena cut into one window per queue pair.
//
// # Layout (version 2)
//
//	[0, 4096)            header: magic, version, geometry, then on their own
//	                     cache lines the agent's generation, heartbeat, state
//	[qpTable, +n*2048)   one control block per queue pair, every word on its
//	                     own 128-byte line (two 64-byte lines: x86's adjacent-
//	                     line prefetcher pairs them)
//	[rings, ...)         per queue pair: submission ring, completion ring,
//	                     entries × 64-byte descriptors each
//	[arena, ...)         per queue pair: a window of WindowSize bytes
//
// The agent formats the region (Format) and keeps the geometry in its own
// memory; it never re-reads it from the region. A host reads the header once
// at Attach and checks every field before it trusts it (the generation
// against queue pair 0's state word too).
//
// Each control block also carries the agent's heartbeat (version 2): an
// attached host watches its own pair's copy, so a header something writes
// over cannot make it give up on a live agent; the header's heartbeat is
// for attaching.
//
// # Ownership of words
//
// Every index is a single-writer word touched only through sync/atomic:
// the host writes the submission tail and the completion head, the agent the
// submission head and the completion tail. Descriptors are written with plain
// stores before the index that publishes them (release) and read after the
// index (acquire); the agent copies a descriptor out of the ring with atomic
// 64-bit loads, once, and validates only the copy. On arm64 (weakly ordered)
// the atomics are what make this correct; x86 and QEMU's TCG would hide a
// missing one, so the -race tests are what catch it.
//
// # Leases
//
// A host process takes a free queue pair by compare-and-swap on its lease word
// {epoch:32, pid:32}, then writes its start time (from /proc/self/stat) and
// starts its heartbeat. The agent binds a leased pair, and fences it when the
// holder releases it, its pid is gone or reused (when the agent shares the
// host's pid namespace), or its heartbeat is stale: the pair goes FENCED, the
// agent drains its in-flight work, zeroes its indices, bumps the epoch and only
// then marks the lease free. A host therefore never sees a free pair with old
// indices or work in flight.
//
// Binding rewrites the pair: before the agent marks a newly leased pair
// active it zeroes every index, the reset request and the sleepers count,
// whatever a former holder or a scribbler left there. Lease gives back a
// pair that faults or is not bound in time and tries the next; it fails
// only when none binds.
//
// # Repairs
//
// Housekeeping compares the header and every pair's state word with the
// agent's own copy and writes them again where they differ (Agent.
// HeaderRepairs, AgentQP.Repairs count it); a free pair's lease epoch is
// restored the same way. A host refused for a header caught mid-scribble
// attaches once the agent has repaired it (at least every half second).
//
// # Faults
//
// A submission tail that moves backwards or runs more than a ring ahead of the
// head, or a completion head that does the same, faults the pair: the agent
// stops serving it and marks it FAULTED. Its holder must reset it (Reset) to
// go on; the other pairs are not affected. A descriptor that fails to decode
// or validate is not a fault: it completes with an error status.
//
// # Restarts
//
// Each Format bumps the generation, written to the header and into every
// pair's state word. A host that sees its pair's generation change fails what
// it had in flight with the retryable wire.StatusRestarted and attaches again.
//
// # A region that loses its backing
//
// Anyone who may write the region file may also truncate it, and an access
// past the new end takes SIGBUS. Region.CatchFault turns such a fault into
// ErrRegionLost (Go's debug.SetPanicOnFault) instead of a dead process;
// Agent.Lost notices a file cut short, and Agent.Rebuild sizes it back and
// formats it again with the next generation, to which hosts re-attach. The
// agent keeps the path-based region (a file in /dev/shm, an ivshmem BAR's
// resource file) rather than a sealed memfd handed over a socket: the BAR
// cannot be sealed, and on a DPU the host's memory is reached by DMA, so
// the fault handling is needed anyway; a sealed memfd would change every
// client's attach for the one local case it protects.
//
// # Trust and isolation
//
// The agent trusts nothing in the region. Anything with write access to the
// region file can disturb any pair (a lease word is only a word); isolation
// between host processes is the file's permissions, not this protocol. What
// the protocol guarantees is that the agent neither crashes, hangs nor
// touches memory outside a pair's own window whatever is written, and that a
// pair nobody scribbles on keeps working beside one that is scribbled on.
// hecd creates the file with mode 0600, owned by the user it runs as: only
// that user's processes (and root) may attach. A pair whose host holds its
// completion ring full, or that is faulted or unbound, costs the agent
// nothing (AgentQP.HasWork) until its host moves a word.
//
// # Spans and the accessor
//
// Services reach a window through Accessor: a mapped view where the memory is
// mapped (a /dev/shm file, the ivshmem BAR through resource2_wc), or staged
// copies where it is not, which is how a BlueField's Arm cores reach host
// memory (DMA). Code written against Accessor does not change with the
// transport.
package ring
