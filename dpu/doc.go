// Package dpu is the agent, hecd: its configuration, its lifecycle, the
// dispatcher that serves the handoff (shared-memory queue pairs and the TCP
// fallback transport), the management API and its metrics.
//
// # Lifecycle
//
// New checks a Config (defaults filled in one place, Config.withDefaults),
// and Agent.Run maps the region, formats it with a new generation (kept in
// the state directory, so it grows across restarts even when the region file
// is gone), starts the dispatcher, the TCP listener and the management HTTP
// server, and reports ready. On cancellation it marks the region stopped
// (hosts see it and fail in-flight work with a retryable status), drains and
// returns.
//
// # Services
//
// A service registers handlers for its op codes with Dispatcher.Handle. A
// handler sees a Request: the validated copy of the descriptor and an
// ring.Accessor for the memory its spans name — the queue pair's window over
// shared memory, or the frame's payload over TCP — so it is written once for
// both transports. Cheap handlers (Inline) run on the polling goroutine; the
// others on a pool of workers whose completions the poller writes back.
//
// The kv service (package kv) is served three ways: its ops over the
// handoff, the Redis protocol (kv/resp) and the UDP GET path (kv/udp). A
// configured service the agent cannot serve is reported as "not served" in
// the log, in /v1/status and by hecctl: never silently ignored.
package dpu
