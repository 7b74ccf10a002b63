// Package handoff is the seam between the agent and the transports that
// carry the handoff from hosts to it over a connection: TCP (package
// tcp: descriptors and their payload inline on a stream) and RDMA
// (package rdma: descriptors as messages, the host's window read and
// written by the NIC). The region's rings, the agent's own memory shared
// with its hosts, are the dispatcher's.
//
// A Transport accepts hosts and serves each host's descriptors through a
// Server, the agent as a transport sees it: a session per host, each
// descriptor served with the memory the transport holds for it, the
// operator's token, a rate-limited log. The agent starts the transports
// its configuration names from one table (dpu's handoffTransports): a
// new transport is a package implementing Transport and a line there.
package handoff
