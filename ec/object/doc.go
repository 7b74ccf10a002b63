// Package object keeps erasure-coded objects across agents (TrimEC's
// case): an object is cut into stripes, each stripe into k data and m
// parity shards (package ec), and shard i of every stripe lives on the
// i-th agent of the object's placement.
//
// # Roles
//
// A Store is one agent's share: shard files and their metadata in a
// directory, served to the others by messages (msg.go: Request, Reply).
// A Coordinator puts, gets, lists, deletes and repairs objects by sending
// those messages to the stores over a Transport: the agent's coordinator
// uses the peer layer (the DPU codes inline on the write path); the host
// library's client-side baseline reaches every agent's store itself, as
// HDFS and MinIO clients do.
//
// # On disk
//
// A shard is a file in the store's directory: its whole pieces are
// written past the page cache (O_DIRECT) where the file system takes it,
// a shorter last piece through the page cache; its data is synced in the
// background every few MiB as the pieces come; the seal fsyncs the file,
// writes its metadata record and renames it into place.
//
// # Placement
//
// Rendezvous (highest-random-weight) hashing of the object's name over the
// members picks k+m agents, one failure domain each; the placement is
// recorded in every shard's metadata, so any surviving agent can say
// where the others are, and membership changes do not move objects
// already written.
//
// # Versions, quorum and what a reader sees
//
// Every Put gets a new Version (wall-clock nanoseconds, the writer's node
// and a random word: concurrent Puts of one name order, and never
// collide). Every shard names its version, so a reader never mixes the
// shards of two Puts, even when each passes its own CRC. A Put prepares,
// writes and seals its shards; once a write quorum (default k+1) is
// sealed — durable — it commits them, and is acknowledged once a quorum
// has committed. A reader takes the newest version committed on any
// agent it reaches, of which it can read k valid shards; a version that
// never reached its seal quorum is never committed, so a failed Put leaves
// the previous version what readers get. A store keeps the two newest
// committed versions of a name, older ones for a grace period after they
// were superseded (a reader that began on one finishes it), and every
// newer one still being written.
//
// Deletes are Puts of a tombstone: a reader that finds a tombstone newest
// reports the object absent. A tombstone stays until every agent of the
// placement has applied it; then the coordinator purges it.
//
// # Untrusted input
//
// Every message is bounds-checked (FuzzParseRequest); a store checks that
// a shard's size, version, object and placement agree with what it
// prepared, and its CRC, before it keeps a byte; a reader takes the
// header most shards of a version agree on and ignores a store whose
// record disagrees, and checks each stripe it decodes against the
// stripe's own CRC.
package object
