// Package rdma carries the handoff over RDMA (libibverbs and librdmacm,
// through shared/verbs and shared/rdmalink): a host registers its window
// once and sends descriptors as messages; the agent reads each op's spans
// into its mirror of the window with RDMA READ, serves the op, writes the
// outputs back with RDMA WRITE and sends the completion after them. The
// zero copy that shared memory gives locally, across a NIC. Spans past
// the window are refused before any read; the NIC checks the key too.
package rdma
