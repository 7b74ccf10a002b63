// Package ec is HEC's erasure coding: Reed-Solomon over GF(2^8) with the
// Cauchy matrix (klauspost/reedsolomon; one of the two matrices
// BlueField-3's EC engine offers, so parity can agree with the hardware's).
//
// An object of any length is cut into k data shards of one shard size (a
// multiple of 64 bytes, the tail zero-padded, the true length recorded)
// and m parity shards; any k of the k+m shards give it back. Each shard
// carries a CRC-32C, so a corrupted shard counts as missing rather than
// poisoning a rebuild.
//
// Reed-Solomon is column-wise: byte j of every parity shard depends only on
// byte j of the data shards. So a stripe can be coded in column chunks
// (EncodeStream, DecodeStream: objects larger than memory or than the
// shared region), and one stripe can be split by columns across rails —
// the host's cores and the DPU's — each coding its own columns
// (ColumnCoder). A Coder codes in this process; the host library's EC
// client is a ColumnCoder that codes through the agent.
//
// Files: EncodeFile writes a directory of shard files and manifest.json
// (see Manifest); DecodeDir rebuilds the object from whatever valid
// shards remain; VerifyDir checks every shard and the parity. A plain
// reedsolomon decoder with the Cauchy matrix, given the manifest, decodes
// the shard files too: the object is the data shards concatenated, cut at
// size.
package ec
