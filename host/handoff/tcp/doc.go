// Package tcp is the host's TCP transport (tcp://HOST:PORT): descriptors
// and their payloads inline on one connection, outputs appended to the
// answers (package wire's frames). It is the fallback where no region is
// shared, and the way to an agent across a network; an agent with an
// operator's token asks for it first (wire.AuthHost). A lost connection
// fails the calls in flight with a retryable status, and the next op
// dials again.
package tcp
