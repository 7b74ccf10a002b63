// Command libhec is the host library for C, C++ and Python: package host
// exported through cgo as lib/libhec.so (-buildmode=c-shared) and
// lib/libhec.a (c-archive), with the hand-written header include/hec.h.
// `make build` builds both; Go programs keep linking package host.
//
// Every exported function validates what C gives it (NULL pointers,
// handles, lengths against the shared window), recovers from a panic, and
// answers with a negative HEC_E* code and a per-thread message
// (hec_last_error) instead of crashing the caller. Handles are small
// integers disguised as pointers: a closed or made-up one is unknown to the
// registry, never dereferenced.
package main
