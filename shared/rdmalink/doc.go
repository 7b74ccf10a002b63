// Package rdmalink carries messages over one RDMA connection (a
// verbs.Conn the connection manager made): a fixed number of registered
// message slots each way (SEND into the peer's posted receives), RDMA
// READ and WRITE between the connection's registered regions and the
// peer's, and one poller goroutine that takes every completion, spinning
// a while as the rings' waiters do (ring.Waiter), then sleeping in the
// kernel until the next completion (the queue's completion channel). The
// RDMA handoff (host library and agent) and the peer links over RDMA
// (Stream) run on it.
//
// A Link knows nothing of what its messages mean; it ends when the peer
// disconnects, a work request fails, or Close is called, and then every
// wait on it fails with the reason (Err).
package rdmalink
