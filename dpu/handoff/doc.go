// Package handoff is the seam between the agent and the transports that
// carry the handoff from hosts to it: shared memory (package shm: the
// region's rings, in memory the agent shares with its hosts), TCP
// (package tcp: descriptors and their payload inline on a stream) and
// RDMA (package rdma: descriptors as messages, the host's window read
// and written by the NIC).
//
// A Transport accepts hosts and serves each host's descriptors through a
// Server, the agent as a transport sees it: a session per host, each
// descriptor served with the memory the transport holds for it, the
// operator's token, a rate-limited log. The shm transport owns the
// region (its file, lock, mapping, formatting and stop) and hands its
// rings to a RingServer, the agent's poller, whose scheduling of the ops
// it takes is the dispatcher's. The agent starts the transports
// its configuration names from one table (dpu's handoffTransports): a
// new transport is a package implementing Transport and a line there.
package handoff
