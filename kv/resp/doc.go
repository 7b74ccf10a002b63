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
// Clients are served by epoll event loops, one per core (loop_linux.go):
// commands that cannot wait run on the loop, queued SETs park their client
// until the committer notifies, other writes and scans run on a worker
// goroutine. Every request is parsed with limits (arguments per command,
// bytes per argument, bytes per request); a client that breaks them gets
// an error and is disconnected, others are not disturbed. A client's
// requests wait while its unwritten replies pass Limits.ReplyBuffer, and a
// client that reads none for WriteTimeout is dropped, so one that does not
// read holds bounded memory.
package resp
