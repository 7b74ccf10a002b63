// Package collbench is the bench behind `hecctl coll bench` and `hecctl
// rails plan`: Run starts a rank per host process (and an agent each for
// the DPU and auto rails; in network namespaces of a cluster as root, or
// on loopback), RunRank is one rank's side, and Row is what rank 0
// reports per rail and size, in nccl-tests' terms. The CLI prints the
// rows; test/bench reads them with this one Row, so that a renamed field
// breaks the build rather than a figure.
package collbench
