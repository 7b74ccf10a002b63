// Package e2e holds end-to-end tests of the agent (dpu) and the host library
// (host) together: several client processes, clients killed with SIGKILL,
// the agent restarted under running clients, hostile descriptors against a
// running agent. The agent runs in the test process; clients run in it or
// in processes re-executed from the test binary.
package e2e
