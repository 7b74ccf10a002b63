// Package accept is the one accept loop of the agent's stream listeners
// (the TCP handoff, RESP, the peer layer): it hands each connection to a
// handler in a goroutine of its own, tracks the connections so that Close
// ends them all and waits for their handlers, and survives accept errors.
//
// An accept error other than a closed listener is retried with back-off
// (5 ms doubling to 1 s), so a storm of EMFILE — every descriptor of the
// process in use — neither spins a core nor stops the listener: the
// connections waiting in the kernel's backlog are taken once descriptors
// free up. Each retry is counted (Retries, for a metric). Errors that are
// not about resources or a single connection are retried too, but a
// listener that keeps failing with them (maxHardErrors in a row) has
// stopped for good: Run returns the error so the service can say so.
package accept
