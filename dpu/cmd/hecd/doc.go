// Command hecd is the HEC agent. It runs on a DPU's Arm cores (cross-compiled
// for linux/arm64) or, as a local emulation, as a plain process on the host.
//
// Configuration comes from defaults, then an optional TOML file (--config),
// then flags; see dpu.Config for every field. SIGTERM or SIGINT stop it
// cleanly.
//
//	hecd [--config FILE] [--shm PATH|off] [--tcp ADDR|off] [--mgmt ADDR|off]
//	     [--resp ADDR|off] [--udp ADDR|off] [--state-dir DIR] ...
package main
