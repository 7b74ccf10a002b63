// Package resp serves a kv.Store over the Redis protocol (RESP2), with
// pipelining, so redis-cli, redis-benchmark and Redis client libraries work
// unchanged.
//
// Commands: the strings, keys, expiry, transaction and introspection
// commands of Redis 7 (commandTable in commands.go lists them; COMMAND
// shows them), with Redis's replies and error texts — TestSameAnswersAsRedis
// runs one redis-cli session against hecd and against redis-server and
// compares. Lists, sets, hashes and sorted sets (typed.go, lists.go,
// sets.go, hashes.go, zsets.go) are each one value of its kind in the store
// (kv.Kind), read and written whole in one commit; streams, blocking pops
// and scripting answer Redis's unknown-command error. One database (0).
// INCRBYFLOAT computes in a C long double as x86 Redis does. Expiry is to
// the millisecond, as in Redis.
//
// A write the store refuses (a full disk, or a failed sync: see package
// kv) is answered "MISCONF ...", as Redis answers writes after a failed
// AOF write; reads go on. MULTI/EXEC run the queued commands with no
// other client's operation between them, from any front end (EXEC holds
// the store's gate, kv.Store.Gate, alone).
//
// A client's pipelined SETs are queued in the store and share one commit;
// a GET behind them is answered without waiting for it (from the queued
// SET of its key, or the store), its reply written after theirs.
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
