// Package dpu is the agent, hecd: a small core — the dispatcher that
// serves the handoff (its poller serves the region's shared-memory queue
// pairs; the transports, package handoff's, started from one table in
// transports.go: the region (shm), TCP and RDMA), the management API and
// its metrics, the lifecycle — and the services it composes (the kv
// store, its RESP and UDP GET front ends, the peer layer, the XDP fast
// path, erasure coding, collectives, and the updater that installs signed
// bundles into the A/B slots of package slots).
//
// # Lifecycle
//
// New checks a Config (defaults filled in one place per section,
// withDefaults; ParseArgs is hecd's path: defaults, then a TOML file, then
// flags bound straight to the fields). Agent.Run then takes everything that
// can fail before it touches the region: a lock on the state directory and
// one on the region file (a second agent says which pid holds them and
// leaves them alone), the management listener, every service's resources
// (Service.Open) and the handoff's other transports. Only then does it
// format the region with a new generation (kept in the state directory,
// so it grows across restarts), start the services in order, and serve. A
// failure to start is an error naming the flag, never a crash. On
// cancellation it stops the transports (the region marked stopped: hosts
// fail in-flight work with a retryable status) and the management API,
// stops the services in reverse order — waiting for every goroutine each
// one started — and unmaps the region last (package handoff/shm owns the
// region's file, lock, mapping and formatting).
//
// # Handlers
//
// A service registers handlers for its op codes with Dispatcher.Handle. A
// handler sees a Request: the validated copy of the descriptor and a
// ring.Accessor for the memory its spans name — the queue pair's window
// over shared memory, or the frame's payload over TCP — so it is written
// once for both transports. Cheap handlers (Inline), and requests that
// name at most InlineMax bytes (InlineAlone on an agent with one P, where
// a worker could not run beside the poller), run on the polling
// goroutine; the others on a pool of workers whose completions the poller
// writes back; handlers that wait on other agents (Detached) on goroutines
// of their own, so that they hold no worker.
//
// # Adding a service
//
// A service is a type implementing Service, in files of its own in this
// package (kv.go, resp.go, udp.go, peers.go, xdp.go and ec.go are the
// examples):
//
//  1. Its configuration section: a FooConfig struct with a toml tag and a
//     comment on each field, and its methods withDefaults (every zero
//     field gets its default), validate (errors name the flag) and flags
//     (each flag bound to its field: adding a setting is one edit).
//  2. Its Service: Open takes what can fail — listeners through
//     Env.Listen or Env.ListenPacket, which name the flag in their errors
//     — and registers its handoff ops (env.Dispatcher), management routes
//     (env.Mux), Prometheus collectors (env.Metrics), and any Shared piece
//     it provides. Start serves, on goroutines started with env.Go;
//     stream listeners go through env.Serve, which retries accept errors
//     with back-off, counts them, and marks the service stopped (not
//     ready, with the reason in /v1/status) if the listener fails for
//     good. Stop closes what it opened so its goroutines return; the core
//     waits for them. Status is its row in /v1/status; a service with
//     more to report implements StatusFiller, its type in shared/api.
//  3. Its op codes, if it serves the handoff: in shared/wire.
//  4. One line in services.go: its section in Config (and in sections)
//     and its constructor in services, in start order.
//  5. The README: what it serves and its flags.
//
// Nothing in agent.go names a service (a repository test checks it).
package dpu
