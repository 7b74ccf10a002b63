// Package udp answers GETs in the memcached UDP format from a kv.Store:
// each datagram carries an 8-byte frame header (request id, sequence
// number, datagram count, reserved) and "get <key>\r\n" (or "gets"); the
// reply echoes the request id with sequence 0 of 1 and carries
// "VALUE <key> <flags> <bytes>\r\n<data>\r\nEND\r\n", or "END\r\n" for a miss.
// A value too large for one datagram gets "SERVER_ERROR object too large for
// UDP\r\n" (memcached's wording), never a truncated value.
//
// This is the user-space path. The agent's XDP program (package bpf)
// answers hot keys in the kernel from a map, filled with this package's
// AppendReply; the keys it holds are those Seen here most often.
package udp
