// Package ring is the shared-memory region between host processes and the
// agent: a header, a table of leased queue pairs, their submission and
// completion rings, and the buffer arena cut into one window per queue pair.
//
// # Layout (version 1)
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
// at Attach and checks every field before it trusts it.
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
// # Trust and isolation
//
// The agent trusts nothing in the region. Anything with write access to the
// region file can disturb any pair (a lease word is only a word); isolation
// between host processes is the file's permissions, not this protocol. What
// the protocol guarantees is that the agent neither crashes, hangs nor
// touches memory outside a pair's own window whatever is written, and that a
// pair nobody scribbles on keeps working beside one that is scribbled on.
//
// # Spans and the accessor
//
// Services reach a window through Accessor: a mapped view where the memory is
// mapped (a /dev/shm file, the ivshmem BAR through resource2_wc), or staged
// copies where it is not, which is how a BlueField's Arm cores reach host
// memory (DMA). Code written against Accessor does not change with the
// transport.
package ring
