// Package handofftest is the contract every host transport
// (handoff.Transport) is held to, run by each transport's own tests
// against a real agent (Start): ops and their answers, inputs in and out
// of the window, outputs placed in the caller's buffers, the agent's
// statuses, batches and concurrent callers, a wait's context, and Close
// with ops in flight. Adding a transport, its test calls Run.
package handofftest
