// Package resp serves a kv.Store over the Redis protocol (RESP2), with
// pipelining, so redis-cli, redis-benchmark and Redis client libraries work
// unchanged.
//
// Commands: PING ECHO GET SET (EX PX EXAT NX XX KEEPTTL GET) DEL EXISTS MGET
// MSET INCR INCRBY DECR DECRBY EXPIRE PEXPIRE TTL PTTL PERSIST SCAN (MATCH
// COUNT) DBSIZE INFO AUTH SELECT(0) HELLO(2) COMMAND CONFIG GET CLIENT
// (SETNAME GETNAME SETINFO ID) QUIT. Errors are Redis' own ("ERR ...",
// "NOAUTH ...", "NOPROTO ..."). Expiry has the store's one-second resolution:
// a key lives at least its TTL and at most a second more.
//
// Every request is read with limits (arguments per command, bytes per
// argument, bytes per request); a client that breaks them gets an error and
// is disconnected, others are not disturbed. Replies go through a bounded
// buffer and a write deadline, so a client that does not read holds at most
// that much memory before it is dropped.
package resp
