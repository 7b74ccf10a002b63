// Package bpf holds the agent's eBPF/XDP fast path and its loader.
//
// xdp.c (compiled by bpf2go into the committed hec_bpfel.go and
// hec_bpfel.o; make generate rebuilds them with clang) runs on the
// agent's interface. For every packet it parses Ethernet, up to two VLAN
// tags, IPv4 or IPv6 (with extension headers), then UDP or TCP, with a
// bounds check before every read, and:
//
//   - classifies it into a Class by the configured service ports: RESP,
//     UDP GET, peer, management (matched on the destination port, or on
//     the source port for replies to the agent's own connections), else
//     other;
//   - drops packets whose length fields point past the packet (reason
//     "malformed") and, on the service ports, packets from sources the
//     allow-list denies (reason "acl"; LPM tries for IPv4 and IPv6,
//     longest prefix wins, then the default);
//   - counts packets, bytes, passed, dropped by reason and answered per
//     class (per-CPU), and packets and bytes per source in a per-CPU table
//     of 1024 buckets where a heavy source keeps its bucket (Talkers);
//   - samples one packet in SampleEvery, its first SnapLen bytes, into a
//     ring buffer (Samples);
//   - answers UDP GETs (memcached framing) for keys held in the hot map
//     with XDP_TX: addresses and ports swapped, IPv4 header and UDP
//     checksums computed, the frame grown at its tail or, where the driver
//     left no tailroom (veth, generic XDP), at its head. Misses, expired
//     keys, "gets", fragments, packets with IP options or IPv6 extension
//     headers, and requests with a wrong IPv4 header checksum pass up to
//     the user-space path.
//
// The hot map (HotCache) is an array the agent maps into its memory: a key
// sits in one of two slots chosen by its hash, so the program finds it
// with no map lookup, under a sequence count per slot; see hot.go for the
// protocol that keeps a reader from ever seeing a value older than the
// last acknowledged write.
//
// Counters, talkers and the allow-list are pinned under PinDir
// (/sys/fs/bpf/hec/NAME by default in the agent), so they outlive an agent
// restart; the hot map is not: a new agent starts it empty.
package bpf
