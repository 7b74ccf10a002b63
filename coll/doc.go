// Package coll is HEC's collectives (the HCCL case study): AllReduce,
// ReduceScatter, AllGather, Broadcast, Reduce, AllToAll and Barrier among
// the ranks of a communicator, over any Transport.
//
// # Algorithms
//
// A buffer of n bytes among p ranks moves by the ring (bandwidth-optimal:
// AllReduce sends 2(p−1)/p·n over each link, in 2(p−1) steps) or by
// recursive doubling and binomial trees (latency-optimal: log2 p steps of
// the whole buffer). An α–β model of the links picks one per call: the
// communicator measures α and the rate at its first collective that
// chooses (both algorithms in turn, the slowest rank's times, so every
// rank fits the same model), unless Config gives them; Config.Algorithm
// forces one. Buffers move in chunks (Config.Chunk) and
// each chunk goes on as soon as it is reduced, so sending, receiving and
// reducing overlap. ReduceScatter and AllGather are the ring's halves,
// AllToAll a pairwise exchange, Barrier a dissemination barrier.
//
// # Types and reductions
//
// float32, float64, float16, bfloat16, int32, int64, uint8 with sum, prod,
// min, max, avg. 16-bit floats are reduced in float32 and rounded once
// per step (to nearest, ties to even); integers wrap. The kernels (Reduce,
// and ReduceTo for an out-of-place collective's first reductions, which
// read the caller's send buffer so that it is never copied into recv
// first) are plain loops over typed views of the buffers, in the
// machine's byte order (both amd64 and arm64 are little-endian, as the
// wire is); float32 and float64 sums run in AVX2 where the CPU has it
// (SumKernel), with the loops' results bit for bit. A communicator
// allocates nothing in its steady state: received chunks come from a
// pool (shared/bufpool), scratch space is kept.
//
// # Transports
//
// Local joins ranks in one process (tests). PeerTransport carries a
// communicator over shared/peer — authenticated, sealed TCP between agents
// or host processes — through an Endpoint that routes frames by
// communicator id and epoch. Open (group.go) is how host processes form a
// group: rank 0 listens at a root address, every rank registers its peer
// address there (NCCL's unique id, as an address) — or they meet in etcd
// (registry.go, a root etcd://HOST:PORT/NAME), spoken to over its JSON
// gateway so that programs linking the host library carry no gRPC.
//
// # The flight recorder
//
// Each communicator keeps its last collectives (Config.History, default
// 1,000: number, kind, size, type, state, messages received, times;
// recorder.go) and notes, by rank, the last collective a message of each
// other rank came of. Comm.Status reads them without waiting for the
// collective running; an agent serves its communicators' at GET /v1/coll
// and `hecctl coll status` gathers them across agents. A failed
// collective's error says which it was (#number), the last this rank
// completed, and the ranks it last heard at an earlier one.
//
// # Faults
//
// Never a hang. A rank waited on that sends nothing for the peer layer's
// deadline is declared dead, however long the collective (progress, not a
// timeout, is what counts: a 64 MiB allreduce on a slow link keeps
// sending); a broken connection declares it dead at once, and so does a
// send it takes nothing of for the deadline. The rank that notices aborts
// the communicator on every rank — a send blocked on a rank that does not
// read gives up then — so each call returns an error naming the rank that
// failed, and the communicator is unusable until rebuilt without it
// (PeerTransport.Without, Group.Rebuild), at a new epoch whose frames
// never mix with the old one's. Waiting blocks on
// channels: no poller spins, however many ranks share the cores.
package coll
