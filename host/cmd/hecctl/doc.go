// Command hecctl is the operator's CLI for a HEC agent.
//
//	hecctl status               agent version, generation, services, queue pairs, op counts
//	hecctl ping [--n N]         N round trips; p50, p90, p99
//	hecctl checksum [--verify] FILE
//	                            CRC-32C of FILE computed by the agent
//	hecctl metrics              the agent's hec_* Prometheus series
//
// Every command takes --agent (shm:///dev/shm/NAME, tcp://HOST:PORT, a bare
// path or HOST:PORT) and --mgmt HOST:PORT; with neither it finds an agent on
// the defaults (shm:///dev/shm/hec0, 127.0.0.1:7600).
package main
