// Command hecd is the HEC agent. It runs on a DPU's Arm cores (cross-compiled
// for linux/arm64) or, as a local emulation, as a plain process on the host.
//
// Configuration comes from defaults, then an optional TOML file (--config),
// then flags; see dpu.Config for every field. SIGTERM or SIGINT stop it
// cleanly.
//
//	hecd [--config FILE] [--shm PATH|off] [--tcp ADDR|off] [--mgmt ADDR|off]
//	     [--resp ADDR|off] [--udp ADDR|off] [--state-dir DIR] ...
//
// hecd supervise is the loader of an agent flashed with A/B slots on a
// DPU's Linux or a host (package pid1's Supervise): it runs the agent from
// the slot its record names, this binary as the base, commits a new slot
// once it is ready and rolls back to the committed one when it is not.
//
//	hecd supervise [--trusted-key FILE] [--tries N] [--gate DURATION] [--probe-cert FILE --probe-key FILE] -- [hecd flags]
//
// As process 1 of an image it is the machine's init (package pid1).
package main
