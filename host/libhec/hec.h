/*
 * hec.h — the HEC host library for C, C++ and Python (through ctypes).
 *
 * libhec is the Go host library (github.com/hecsys/hec/host) built as a C
 * library: `make build` writes lib/libhec.so, lib/libhec.a and include/hec.h
 * (a copy of host/libhec/hec.h). Link with -Iinclude -Llib -lhec
 * -Wl,-rpath,$PWD/lib (the static archive: lib/libhec.a -lpthread -lm -ldl).
 *
 * Conventions
 *  - Every call returns HEC_OK (0) or a negative HEC_E* code; hec_strerror
 *    names a code, hec_last_error gives the calling thread's message for its
 *    last failed call (it stays valid until that thread's next failing call).
 *  - Handles (hec_client, hec_coll, hec_op) are opaque. A NULL, closed or
 *    made-up handle is answered with HEC_EBADHANDLE, never a crash.
 *  - Every call is safe from many threads at once, also on one client.
 *  - Ownership: memory from hec_alloc belongs to the client until hec_free
 *    or hec_close (which frees every buffer it still holds: pointers into
 *    them must not be used after). The library never keeps a caller's
 *    pointer after a synchronous call returns; for an asynchronous call
 *    (hec_*_async) every buffer and result pointer it was given must stay
 *    valid until hec_test or hec_wait reports the op finished.
 *  - Zero copy: buffers from hec_alloc lie in the agent's shared window
 *    and are handed over in place; any other memory is copied into the
 *    window (or sent, over TCP) and back. A pointer into the window that is
 *    not inside a live hec_alloc buffer, or a length that runs past the end
 *    of the buffer it starts in, is refused (HEC_ERANGE / HEC_EINVAL).
 *  - Timeouts: every call is bounded by the client's timeout (hec_dial's
 *    timeout_ms; 0 means 30 s).
 */
#ifndef HEC_H
#define HEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes. */
enum {
	HEC_OK = 0,
	HEC_EINVAL = -1,       /* a bad argument: NULL pointer, bad size, bad name */
	HEC_EBADHANDLE = -2,   /* a NULL, closed or unknown handle */
	HEC_ENOTFOUND = -3,    /* no such key or object */
	HEC_ERANGE = -4,       /* a buffer too small (the size needed is returned) or past its end */
	HEC_ENOMEM = -5,       /* the shared window is full */
	HEC_EUNREACHABLE = -6, /* the agent cannot be reached, or died */
	HEC_EDENIED = -7,      /* the agent wants a (different) token */
	HEC_ETIMEDOUT = -8,    /* the call ran past its time */
	HEC_ECLOSED = -9,      /* the client was closed */
	HEC_EEXIST = -10,      /* a conditional put found the key */
	HEC_EAGAIN = -11,      /* an asynchronous op has not finished yet */
	HEC_ECORRUPT = -12,    /* a shard or value failed its checksum */
	HEC_EAGENT = -13,      /* the agent refused or failed the op (see hec_last_error) */
	HEC_EINTERNAL = -14    /* a bug in libhec (see hec_last_error) */
};

/* Element types and reductions of the collectives (coll.DType, coll.Op). */
enum { HEC_FLOAT32 = 1, HEC_FLOAT64, HEC_FLOAT16, HEC_BFLOAT16, HEC_INT32, HEC_INT64, HEC_UINT8 };
enum { HEC_SUM = 1, HEC_PROD, HEC_MIN, HEC_MAX, HEC_AVG };
/* Collectives (coll.Kind). */
enum {
	HEC_ALLREDUCE = 1, HEC_REDUCESCATTER, HEC_ALLGATHER, HEC_BROADCAST, HEC_REDUCE, HEC_ALLTOALL, HEC_BARRIER
};
/* Where erasure coding runs. */
enum { HEC_RAILS_AUTO = 0, HEC_RAILS_HOST, HEC_RAILS_DPU };

typedef struct hec_client hec_client;
typedef struct hec_coll hec_coll;
typedef struct hec_op hec_op;

#ifndef HEC_NO_PROTOTYPES /* libhec's own Go sources take the types only */
const char *hec_strerror(int code);
const char *hec_last_error(void);
/* The library's version (the Go module's build version). */
const char *hec_version(void);

/* target: "shm:///dev/shm/hec-region" (the default when NULL or ""),
 * "tcp://host:port", or a path. token: the agent's operator token, or NULL. */
int hec_dial(const char *target, const char *token, int timeout_ms, hec_client **out);
/* Closes the client, frees its buffers, and fails its pending ops. */
int hec_close(hec_client *c);
size_t hec_window_size(hec_client *c);

int hec_alloc(hec_client *c, size_t n, void **buf);
int hec_free(hec_client *c, void *buf);

int hec_ping(hec_client *c);
/* CRC-32C (Castagnoli) of buf computed by the agent. */
int hec_checksum(hec_client *c, const void *buf, size_t len, uint32_t *crc);

/* Key-value store. ttl_ms 0: never expires. hec_kv_get copies the value
 * into buf; when cap is too small it returns HEC_ERANGE and sets *len to the
 * size needed. hec_kv_del sets *existed (may be NULL). */
int hec_kv_put(hec_client *c, const void *key, size_t klen, const void *val, size_t vlen, int64_t ttl_ms);
int hec_kv_get(hec_client *c, const void *key, size_t klen, void *buf, size_t cap, size_t *len);
int hec_kv_del(hec_client *c, const void *key, size_t klen, int *existed);

/* Erasure coding (Reed-Solomon, Cauchy matrix): shards holds k data then m
 * parity pointers, each shard_len bytes (a multiple of 64). encode writes
 * the parity. reconstruct rebuilds the shards whose present[i] is 0 (all of
 * them, or only data shards when data_only) into the memory shards[i]
 * points to; at least k shards must be present. */
int hec_ec_encode(hec_client *c, int k, int m, void *const *shards, size_t shard_len, int rails);
int hec_ec_reconstruct(hec_client *c, int k, int m, void *const *shards, size_t shard_len, const uint8_t *present,
                       int data_only, int rails);
/* Erasure-coded objects placed across agents (the agent must have peers).
 * hec_object_get: like hec_kv_get. */
int hec_object_put(hec_client *c, int k, int m, const char *name, const void *data, size_t len);
int hec_object_get(hec_client *c, int k, int m, const char *name, void *buf, size_t cap, size_t *len);
int hec_object_delete(hec_client *c, int k, int m, const char *name);

/* Collectives reduced by the agents (the DPU rail). comm names the
 * communicator (the same on every rank), nodes[] the agents' peer ids in
 * rank order (this client's agent among them). */
int hec_coll_join(hec_client *c, uint64_t comm, uint64_t epoch, const uint32_t *nodes, int n, hec_coll **out);
/* This rank and the number of ranks; a negative code for a bad handle. */
/* The peer-layer node id of c's agent: what this rank puts in nodes. */
int hec_coll_node(hec_client *c, uint32_t *id);
int hec_coll_rank(hec_coll *g);
int hec_coll_size(hec_coll *g);
int hec_coll_allreduce(hec_coll *g, const void *send, void *recv, size_t count, int dtype, int op);
/* Any collective: send_len and recv_len in bytes (see coll.Kind.Sizes). */
int hec_coll_run(hec_coll *g, int kind, const void *send, size_t send_len, void *recv, size_t recv_len, int dtype, int op,
                 int root);
int hec_coll_leave(hec_coll *g);

/* Collectives run by the ranks' processes among themselves (the host
 * rail: no agent reduces). Each rank listens first and gets its peer
 * address (a NUL-terminated string into addr; HEC_ERANGE when addr_cap is
 * too small; HEC_HOST_LISTEN in the environment, read at this call, names
 * the address to listen on, loopback by default), the ranks swap their
 * addresses through a store of their own, and each joins with every
 * rank's address in rank order and a communicator id every rank agrees
 * on. key (16 to 1024 bytes, the same on every rank) authenticates the
 * ranks' messages. The hec_coll then takes the same calls as a DPU-rail
 * one. */
int hec_coll_host_listen(hec_client *c, int rank, int size, const void *key, size_t key_len, char *addr, size_t addr_cap,
                         hec_coll **out);
int hec_coll_host_join(hec_coll *g, uint64_t comm, const char *const *addrs, int n);

/* Asynchronous calls: each starts the call and returns at once with an op;
 * hec_test returns HEC_EAGAIN while it runs, else its result; hec_wait
 * waits up to timeout_ms (-1: until it finishes, which the client's
 * timeout bounds like any call) and returns
 * HEC_ETIMEDOUT when it has not finished (the op stays valid). Once either
 * has returned the result, the op is released. */
int hec_ping_async(hec_client *c, hec_op **op);
int hec_checksum_async(hec_client *c, const void *buf, size_t len, uint32_t *crc, hec_op **op);
int hec_kv_put_async(hec_client *c, const void *key, size_t klen, const void *val, size_t vlen, int64_t ttl_ms, hec_op **op);
int hec_kv_get_async(hec_client *c, const void *key, size_t klen, void *buf, size_t cap, size_t *len, hec_op **op);
int hec_coll_allreduce_async(hec_coll *g, const void *send, void *recv, size_t count, int dtype, int redop, hec_op **op);
/* Collectives started asynchronously are numbered in the order of the
 * calls that start them, and every rank's agent runs them in that order:
 * start the same collectives in the same order on every rank, from one
 * thread or in an order the threads agree on, as with NCCL. */
int hec_coll_run_async(hec_coll *g, int kind, const void *send, size_t send_len, void *recv, size_t recv_len, int dtype,
                       int op, int root, hec_op **out);
int hec_test(hec_op *op);
int hec_wait(hec_op *op, int timeout_ms);
#endif /* HEC_NO_PROTOTYPES */

#ifdef __cplusplus
}
#endif
#endif /* HEC_H */
