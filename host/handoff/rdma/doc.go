// Package rdma is the host's RDMA transport (rdma://HOST:PORT, the
// agent's --rdma-listen): a reliable connection set up by the RDMA
// connection manager (package rdmalink over shared/verbs, which opens
// libibverbs and librdmacm at run time), the window registered once as a
// memory region the agent reads inputs from and writes outputs into with
// RDMA READ and WRITE, descriptors and completions as messages, the ops
// in flight bounded by the agent's message slots.
package rdma
