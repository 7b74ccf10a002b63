// Package trace records where an operation's time goes, on every process
// it passes through: spans (an op's stage on one process, with its start
// and length), kept by a bounded Recorder while someone asks for them,
// and written as Chrome's trace-event JSON, which Perfetto and
// chrome://tracing open.
//
// An op has one ID on every process that serves it, made by OpID from
// where it came (the host's queue pair and process, or its TCP
// connection, as both ends name it) and its descriptor's tag: the host
// library records the op's span from submission to completion under it,
// the agent the op's wait for a worker and its service. Collectives are
// named by communicator and sequence number (CollID), which every rank's
// agent knows from the peer frames' headers.
//
// Recording costs nothing while off: a process records only while a
// recording is under way (Begin), and a recorder holds at most its
// capacity of spans, the oldest dropped first and counted.
package trace
