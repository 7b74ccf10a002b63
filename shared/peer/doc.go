// Package peer is how agents (and hosts, for the host rail) talk to each
// other: length-prefixed frames over TCP carrying a communicator or object
// id, an epoch, the sender's node id and a type, authenticated with the
// cluster's key. Erasure-coded placement and collectives stand on it.
//
// # Wire
//
// A frame is a length prefix, a 40-byte header (frame.go), the payload and
// a 16-byte tag. A connection starts with a Hello each way, in clear,
// authenticated with HMAC-SHA256 under the cluster key over the header, a
// fresh random nonce and the sender's id. Both sides then derive
// per-direction session keys with HMAC-SHA256 from the key and both
// nonces. Every later frame is sealed with AES-GCM under its direction's
// session key, the frame's sequence number as the nonce: the header
// encrypted, the payload authenticated as additional data and sent in
// clear from the caller's buffer (no copy). A wrong key fails the Hello; a
// frame replayed into another connection fails its tag (other session
// keys), one replayed or reordered within a connection too (another
// nonce). Per-frame HMAC would cost more than the link: HMAC-SHA256 runs
// at about 1 GB/s here, GCM's GHASH at about 9 GB/s. On a direct loopback
// connection — both sides saw the same two loopback ends, said so in
// their Hellos — the tags cover headers only (Handshake says why).
//
// # Requests
//
// Call sends a request (TypeRequest) and waits for its Reply: the
// request-and-answer of services built on the layer (erasure-coded
// objects). CallTraced sends with it the id of the traced op it belongs
// to (FlagTraced: the payload starts with the id's length and the id),
// which the peer's handler reads with Traced to record its work under it.
//
// # Liveness and epochs
//
// Liveness is progress-based: a peer from which work is pending (Expect)
// and that has sent nothing within the deadline is declared dead, so a
// large transfer that keeps moving never trips it, and a connection that
// breaks declares its peer dead at once. The other way too: a send fails
// (ErrStalled) and declares its peer dead once the peer has taken none of
// the frame's bytes for the deadline (a stopped peer's kernel takes what
// its buffers hold, then nothing), however long the sender's own
// deadline, while a slow reader never fails one; a blocked send also
// gives up when its context is cancelled. Idle connections carry a
// heartbeat. Aborts go to every member. A frame whose epoch is older than
// its communicator's current one (SetEpoch) is dropped and counted.
package peer
