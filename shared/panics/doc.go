// Package panics contains a panic in the serving of one request, so that
// no request — a host's descriptor, a RESP command, a peer's frame — can
// take the agent down: the request fails with an internal error, the
// panic is counted (Counts, by where it happened: the agent exports
// hec_panics_total), and its
// stack is logged once per place (later panics there log one line, at
// most one per place every 10 s). The caller decides what the request's
// failure means: an error completion, a closed connection, a write not
// acknowledged.
//
// Containing is right only where the panic cannot have left shared state
// half changed; where it may (the store's committer), the service stops
// with the error instead and the agent's supervisor restarts it.
package panics
