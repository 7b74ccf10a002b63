// Package slots keeps the agent's A/B slots: two directories of the
// agent's persistent state, each holding an agent bundle (package bundle),
// and one record that says which slot runs, which one last passed the
// health gate (committed), how often the running one has been tried, and
// the highest version ever committed (the anti-rollback floor).
//
// The record is replaced whole (write, fsync, rename, fsync the directory:
// package durable), so a power cut at any instant leaves the old record or
// the new one. A slot is filled under a temporary name and renamed into
// place, synced, before the record names it; the committed slot is never
// the one written. The slot named "" is the base: the binary the loader
// itself is (the one the image or the operator installed).
//
// The loader (package pid1: process 1, or `hecd supervise`) calls Start
// before it runs a slot (counting the try first, so a try that never
// returns is counted), Commit when the health gate passes, and RollBack
// when it fails; the agent's update service fills the inactive slot and
// calls Try.
package slots
