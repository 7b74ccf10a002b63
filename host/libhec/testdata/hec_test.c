// The C test of libhec, run (under AddressSanitizer) by libhec_test.go
// against three agents that are peers of one another:
//
//	hec_test SHM1 SHM2 SHM3      every test; exits 0 when all passed
//	hec_test --child SHM1        a client that submits a batch and is
//	                             killed (SIGKILL) in the middle of it
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hec.h"

static int failures;

#define CHECK(cond, ...)                                                                                               \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                              \
			fprintf(stderr, __VA_ARGS__);                                                                  \
			fprintf(stderr, " (last error: %s)\n", hec_last_error());                                   \
			failures++;                                                                                    \
		}                                                                                                      \
	} while (0)

#define CODE(call, want)                                                                                               \
	do {                                                                                                           \
		int got_ = (call);                                                                                     \
		CHECK(got_ == (want), "%s returned %d (%s), want %d (%s)", #call, got_, hec_strerror(got_), (want),    \
		      hec_strerror(want));                                                                             \
	} while (0)

// crc32c is the software CRC-32C the agent's answers are checked against.
static uint32_t crc32c(const void *buf, size_t n) {
	static uint32_t table[256];
	if (!table[1]) {
		for (uint32_t i = 0; i < 256; i++) {
			uint32_t c = i;
			for (int k = 0; k < 8; k++)
				c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
			table[i] = c;
		}
	}
	const uint8_t *p = buf;
	uint32_t c = 0xFFFFFFFFu;
	while (n--)
		c = table[(c ^ *p++) & 0xFF] ^ (c >> 8);
	return c ^ 0xFFFFFFFFu;
}

static void fill(void *buf, size_t n, unsigned seed) {
	uint8_t *p = buf;
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 31 + seed * 7 + (i >> 9));
}

static hec_client *dial(const char *target) {
	hec_client *c = NULL;
	int rc = hec_dial(target, NULL, 20000, &c);
	if (rc != HEC_OK) {
		fprintf(stderr, "FATAL: hec_dial(%s): %s: %s\n", target, hec_strerror(rc), hec_last_error());
		exit(2);
	}
	return c;
}

// Bad arguments are answered with codes, never a crash.
static void test_bad_arguments(hec_client *c) {
	hec_client *none = NULL;
	CODE(hec_dial("/nonexistent/hec-region", NULL, 500, &none), HEC_EUNREACHABLE);
	CHECK(none == NULL, "a failed dial left a handle");
	CODE(hec_dial(NULL, NULL, 500, NULL), HEC_EINVAL);
	CODE(hec_dial("/dev/shm/x", NULL, -5, &none), HEC_EINVAL);
	CODE(hec_ping(NULL), HEC_EBADHANDLE);
	CODE(hec_ping((hec_client *)(uintptr_t)0x4242), HEC_EBADHANDLE);
	CODE(hec_close(NULL), HEC_EBADHANDLE);
	CODE(hec_test(NULL), HEC_EBADHANDLE);
	CODE(hec_wait((hec_op *)(uintptr_t)0x10, 10), HEC_EBADHANDLE);
	CODE(hec_coll_leave(NULL), HEC_EBADHANDLE);
	CHECK(strlen(hec_last_error()) > 0, "no message for the last failure");
	CHECK(strcmp(hec_strerror(HEC_ENOTFOUND), "not found") == 0, "strerror: %s", hec_strerror(HEC_ENOTFOUND));
	CHECK(strlen(hec_strerror(12345)) > 0, "strerror of an unknown code");

	uint32_t crc;
	CODE(hec_checksum(c, NULL, 10, &crc), HEC_EINVAL);
	CODE(hec_checksum(c, "abc", 3, NULL), HEC_EINVAL);
	void *buf = NULL;
	CODE(hec_alloc(c, 0, &buf), HEC_ERANGE);
	CODE(hec_alloc(c, hec_window_size(c) + 1, &buf), HEC_ERANGE);
	CODE(hec_alloc(c, 4096, NULL), HEC_EINVAL);
	CODE(hec_alloc(c, 4096, &buf), HEC_OK);
	fill(buf, 4096, 1);
	// A length past the end of the window buffer it starts in.
	CODE(hec_checksum(c, buf, 4096 + 64, &crc), HEC_ERANGE);
	CODE(hec_checksum(c, (char *)buf + 100, 4096, &crc), HEC_ERANGE);
	CODE(hec_checksum(c, (char *)buf + 100, 3996, &crc), HEC_OK);
	CHECK(crc == crc32c((char *)buf + 100, 3996), "crc of a part of a buffer");
	CODE(hec_free(c, (char *)buf + 8), HEC_EINVAL);
	CODE(hec_free(c, buf), HEC_OK);
	// A freed buffer: refused, whether freed again or used.
	CODE(hec_free(c, buf), HEC_EINVAL);
	CODE(hec_checksum(c, buf, 64, &crc), HEC_EINVAL);
	CODE(hec_kv_put(c, NULL, 0, "v", 1, 0), HEC_EINVAL);
	CODE(hec_kv_put(c, "k", 1, "v", 1, -1), HEC_EINVAL);
	size_t n;
	CODE(hec_kv_get(c, "k", 1, NULL, 0, NULL), HEC_EINVAL);
	CODE(hec_ec_encode(c, 0, 2, NULL, 64, HEC_RAILS_HOST), HEC_EINVAL);
	void *shards[3] = {0};
	CODE(hec_ec_encode(c, 2, 1, shards, 64, HEC_RAILS_HOST), HEC_EINVAL);
	CODE(hec_ec_encode(c, 2, 1, shards, 64, 99), HEC_EINVAL);
	CODE(hec_object_put(c, 2, 1, NULL, "x", 1), HEC_EINVAL);
	CODE(hec_object_get(c, 2, 1, "x", NULL, 0, NULL), HEC_EINVAL);
	uint32_t nodes[1] = {1};
	CODE(hec_coll_join(c, 1, 1, nodes, 0, NULL), HEC_EINVAL);
	(void)n;
}

static void test_checksum(hec_client *c) {
	size_t sizes[] = {1, 63, 4096, 1 << 20, (8 << 20) + 3};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		size_t n = sizes[i];
		uint32_t crc = 0;
		// The caller's own memory: copied in by the library.
		char *own = malloc(n);
		fill(own, n, (unsigned)i);
		CODE(hec_checksum(c, own, n, &crc), HEC_OK);
		CHECK(crc == crc32c(own, n), "checksum of %zu bytes of malloc'd memory: %08x", n, crc);
		// The window: zero copy.
		void *w;
		CODE(hec_alloc(c, n, &w), HEC_OK);
		memcpy(w, own, n);
		crc = 0;
		CODE(hec_checksum(c, w, n, &crc), HEC_OK);
		CHECK(crc == crc32c(own, n), "checksum of %zu bytes in the window: %08x", n, crc);
		CODE(hec_free(c, w), HEC_OK);
		free(own);
	}
}

static void test_kv(hec_client *c) {
	const char *key = "c-test:k1", *val = "a value from C";
	CODE(hec_kv_put(c, key, strlen(key), val, strlen(val), 0), HEC_OK);
	char small[4], big[64];
	size_t n = 0;
	CODE(hec_kv_get(c, key, strlen(key), small, sizeof small, &n), HEC_ERANGE);
	CHECK(n == strlen(val), "the size needed: %zu", n);
	CODE(hec_kv_get(c, key, strlen(key), big, sizeof big, &n), HEC_OK);
	CHECK(n == strlen(val) && memcmp(big, val, n) == 0, "got %.*s", (int)n, big);
	// Key and value in the window.
	char *w;
	CODE(hec_alloc(c, 1 << 16, (void **)&w), HEC_OK);
	memcpy(w, "c-test:w", 8);
	fill(w + 64, 60000, 9);
	CODE(hec_kv_put(c, w, 8, w + 64, 60000, 0), HEC_OK);
	char *out = malloc(60000);
	CODE(hec_kv_get(c, "c-test:w", 8, out, 60000, &n), HEC_OK);
	CHECK(n == 60000 && memcmp(out, w + 64, n) == 0, "a 60000-byte value");
	free(out);
	CODE(hec_free(c, w), HEC_OK);
	int existed = -1;
	CODE(hec_kv_del(c, key, strlen(key), &existed), HEC_OK);
	CHECK(existed == 1, "existed %d", existed);
	CODE(hec_kv_del(c, key, strlen(key), &existed), HEC_OK);
	CHECK(existed == 0, "existed %d after the delete", existed);
	CODE(hec_kv_get(c, key, strlen(key), big, sizeof big, &n), HEC_ENOTFOUND);
}

static void test_ec(hec_client *c, int rails, int in_window) {
	enum { K = 4, M = 2, W = 64 * 160 };
	void *shards[K + M], *orig[K + M];
	for (int i = 0; i < K + M; i++) {
		if (in_window)
			CODE(hec_alloc(c, W, &shards[i]), HEC_OK);
		else
			shards[i] = malloc(W);
		orig[i] = malloc(W);
		if (i < K)
			fill(shards[i], W, 100 + i);
		else
			memset(shards[i], 0, W);
	}
	CODE(hec_ec_encode(c, K, M, shards, W, rails), HEC_OK);
	for (int i = 0; i < K + M; i++)
		memcpy(orig[i], shards[i], W);
	int zero = 1;
	for (int i = 0; i < W && zero; i++)
		zero = ((uint8_t *)shards[K])[i] == 0;
	CHECK(!zero, "parity left zero (rails %d)", rails);
	// Lose one data and one parity shard: rebuilt in place.
	uint8_t present[K + M] = {1, 0, 1, 1, 0, 1};
	memset(shards[1], 0xAA, W);
	memset(shards[4], 0xAA, W);
	CODE(hec_ec_reconstruct(c, K, M, shards, W, present, 0, rails), HEC_OK);
	for (int i = 0; i < K + M; i++)
		CHECK(memcmp(shards[i], orig[i], W) == 0, "shard %d not rebuilt (rails %d, window %d)", i, rails, in_window);
	// Too few shards.
	uint8_t three[K + M] = {1, 0, 0, 1, 0, 0};
	CODE(hec_ec_reconstruct(c, K, M, shards, W, three, 0, rails), HEC_EINVAL);
	for (int i = 0; i < K + M; i++) {
		if (in_window)
			CODE(hec_free(c, shards[i]), HEC_OK);
		else
			free(shards[i]);
		free(orig[i]);
	}
}

static void test_objects(hec_client *a, hec_client *b) {
	size_t n = (3 << 20) + 17, got = 0;
	char *data = malloc(n), *back = malloc(n);
	fill(data, n, 77);
	CODE(hec_object_put(a, 2, 1, "c-test/object", data, n), HEC_OK);
	CODE(hec_object_get(b, 2, 1, "c-test/object", back, n - 1, &got), HEC_ERANGE);
	CHECK(got == n, "the size needed: %zu", got);
	CODE(hec_object_get(b, 2, 1, "c-test/object", back, n, &got), HEC_OK);
	CHECK(got == n && memcmp(data, back, n) == 0, "object read back from another agent (%zu bytes)", got);
	CODE(hec_object_delete(a, 2, 1, "c-test/object"), HEC_OK);
	CODE(hec_object_get(b, 2, 1, "c-test/object", back, n, &got), HEC_ENOTFOUND);
	free(data);
	free(back);
}

struct collrun {
	hec_coll *g;
	int rank, rc, wrong;
};

// collrun is one rank's hec_coll_run calls: an allgather of each rank's
// 1000 int32s, then a broadcast of 4096 bytes from rank 2.
static void *collrun(void *arg) {
	struct collrun *a = arg;
	int32_t mine[1000], all[3000];
	for (int i = 0; i < 1000; i++)
		mine[i] = a->rank * 100000 + i;
	a->rc = hec_coll_run(a->g, HEC_ALLGATHER, mine, sizeof mine, all, sizeof all, HEC_INT32, 0, 0);
	if (a->rc != HEC_OK)
		return NULL;
	for (int i = 0; i < 3000; i++)
		a->wrong += all[i] != (i / 1000) * 100000 + i % 1000;
	uint8_t b[4096];
	for (int i = 0; i < 4096; i++)
		b[i] = a->rank == 2 ? (uint8_t)(i * 7) : 0;
	a->rc = hec_coll_run(a->g, HEC_BROADCAST, b, sizeof b, b, sizeof b, HEC_UINT8, 0, 2);
	for (int i = 0; i < 4096; i++)
		a->wrong += b[i] != (uint8_t)(i * 7);
	return NULL;
}

// Three ranks, one per agent: allreduce asynchronously from one thread,
// then the other collectives from a thread per rank.
static void test_coll(hec_client *cl[3]) {
	struct collrun args[3];
	uint32_t nodes[3] = {1, 2, 3};
	hec_coll *g[3];
	for (int r = 0; r < 3; r++) {
		g[r] = NULL;
		CODE(hec_coll_join(cl[r], 0xC0FFEE, 1, nodes, 3, &g[r]), HEC_OK);
		if (!g[r])
			return;
		CHECK(hec_coll_rank(g[r]) == r && hec_coll_size(g[r]) == 3, "rank %d size %d", hec_coll_rank(g[r]),
		      hec_coll_size(g[r]));
	}
	enum { N = 100003 };
	float *send[3], *recv[3];
	hec_op *op[3];
	for (int r = 0; r < 3; r++) {
		CODE(hec_alloc(cl[r], N * sizeof(float), (void **)&send[r]), HEC_OK);
		recv[r] = malloc(N * sizeof(float)); // not in the window: copied back
		for (int i = 0; i < N; i++)
			send[r][i] = (float)((i + r) % 7);
	}
	for (int r = 0; r < 3; r++)
		CODE(hec_coll_allreduce_async(g[r], send[r], recv[r], N, HEC_FLOAT32, HEC_SUM, &op[r]), HEC_OK);
	for (int r = 0; r < 3; r++)
		CODE(hec_wait(op[r], 20000), HEC_OK);
	for (int r = 0; r < 3; r++) {
		int wrong = 0;
		for (int i = 0; i < N; i++)
			wrong += recv[r][i] != (float)(i % 7 + (i + 1) % 7 + (i + 2) % 7);
		CHECK(wrong == 0, "rank %d: %d wrong elements", r, wrong);
	}
	CODE(hec_coll_allreduce(g[0], send[0], recv[0], N, 77, HEC_SUM), HEC_EINVAL);
	CODE(hec_coll_run(g[0], 99, send[0], 4, recv[0], 4, HEC_FLOAT32, HEC_SUM, 0), HEC_EINVAL);
	CODE(hec_coll_run(g[0], HEC_BROADCAST, send[0], 4, recv[0], 4, HEC_FLOAT32, HEC_SUM, 3), HEC_EINVAL);
	// hec_coll_run: an allgather and a broadcast, each rank on a thread.
	for (int r = 0; r < 3; r++)
		args[r] = (struct collrun){.g = g[r], .rank = r};
	pthread_t th[3];
	for (int r = 0; r < 3; r++)
		pthread_create(&th[r], NULL, collrun, &args[r]);
	for (int r = 0; r < 3; r++) {
		pthread_join(th[r], NULL);
		CHECK(args[r].rc == HEC_OK && args[r].wrong == 0, "rank %d: hec_coll_run %d (%s), %d wrong", r, args[r].rc,
		      hec_strerror(args[r].rc), args[r].wrong);
	}
	for (int r = 0; r < 3; r++) {
		CODE(hec_free(cl[r], send[r]), HEC_OK);
		free(recv[r]);
		CODE(hec_coll_leave(g[r]), HEC_OK);
		CODE(hec_coll_leave(g[r]), HEC_EBADHANDLE);
	}
}

struct worker {
	hec_client *c;
	int id, errors;
};

// Many threads share one client: pings, checksums of their own window
// buffer, kv puts and gets of their own keys, asynchronous checksums.
static void *work(void *arg) {
	struct worker *w = arg;
	void *buf;
	if (hec_alloc(w->c, 1 << 16, &buf) != HEC_OK) {
		w->errors++;
		return NULL;
	}
	fill(buf, 1 << 16, (unsigned)w->id);
	uint32_t want = crc32c(buf, 1 << 16);
	for (int i = 0; i < 300; i++) {
		uint32_t crc = 0;
		char key[32], val[32], got[32];
		size_t n = 0;
		snprintf(key, sizeof key, "c-test:t%d:%d", w->id, i % 10);
		snprintf(val, sizeof val, "v%d-%d", w->id, i);
		w->errors += hec_ping(w->c) != HEC_OK;
		w->errors += hec_checksum(w->c, buf, 1 << 16, &crc) != HEC_OK || crc != want;
		w->errors += hec_kv_put(w->c, key, strlen(key), val, strlen(val), 0) != HEC_OK;
		w->errors += hec_kv_get(w->c, key, strlen(key), got, sizeof got, &n) != HEC_OK || n != strlen(val) ||
		             memcmp(got, val, n) != 0;
		hec_op *op;
		crc = 0;
		w->errors += hec_checksum_async(w->c, buf, 1 << 16, &crc, &op) != HEC_OK;
		int rc;
		while ((rc = hec_test(op)) == HEC_EAGAIN)
			;
		w->errors += rc != HEC_OK || crc != want;
	}
	w->errors += hec_free(w->c, buf) != HEC_OK;
	return NULL;
}

static void test_threads(hec_client *c) {
	enum { T = 8 };
	pthread_t th[T];
	struct worker w[T];
	for (int i = 0; i < T; i++) {
		w[i] = (struct worker){.c = c, .id = i};
		pthread_create(&th[i], NULL, work, &w[i]);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		CHECK(w[i].errors == 0, "thread %d: %d failed or wrong calls", i, w[i].errors);
	}
}

static void test_async_batch(hec_client *c) {
	enum { B = 64, S = 256 << 10 };
	char *buf;
	CODE(hec_alloc(c, B * S, (void **)&buf), HEC_OK);
	fill(buf, B * S, 5);
	uint32_t crc[B];
	hec_op *op[B];
	for (int i = 0; i < B; i++)
		CODE(hec_checksum_async(c, buf + (size_t)i * S, S, &crc[i], &op[i]), HEC_OK);
	hec_op *ping;
	CODE(hec_ping_async(c, &ping), HEC_OK);
	for (int i = 0; i < B; i++) {
		CODE(hec_wait(op[i], -1), HEC_OK);
		CHECK(crc[i] == crc32c(buf + (size_t)i * S, S), "async checksum %d", i);
		CODE(hec_test(op[i]), HEC_EBADHANDLE); // released
	}
	CODE(hec_wait(ping, 5000), HEC_OK);
	CODE(hec_free(c, buf), HEC_OK);
}

// The child: a batch in flight, then SIGKILL.
static int child(const char *target) {
	hec_client *c = dial(target);
	char *buf;
	if (hec_alloc(c, 16 << 20, (void **)&buf) != HEC_OK)
		return 3;
	fill(buf, 16 << 20, 3);
	static uint32_t crc[256];
	for (int i = 0; i < 256; i++) {
		hec_op *op;
		if (hec_checksum_async(c, buf + (size_t)(i % 16) * (1 << 20), 1 << 20, &crc[i], &op) != HEC_OK)
			return 4;
	}
	raise(SIGKILL);
	return 5;
}

static void test_killed_client(const char *self, const char *target, hec_client *c) {
	for (int round = 0; round < 3; round++) {
		pid_t pid = fork();
		if (pid == 0) {
			execl(self, self, "--child", target, (char *)NULL);
			_exit(127);
		}
		int st = 0;
		waitpid(pid, &st, 0);
		CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the child ended with status %#x, not SIGKILL", st);
		// The agent goes on serving this client...
		CODE(hec_ping(c), HEC_OK);
		uint32_t crc;
		CODE(hec_checksum(c, "after the kill", 14, &crc), HEC_OK);
		CHECK(crc == crc32c("after the kill", 14), "checksum after a killed client");
		// ...and a new one (the dead client's pair is reclaimed).
		hec_client *again = dial(target);
		CODE(hec_ping(again), HEC_OK);
		CODE(hec_close(again), HEC_OK);
	}
}

// hec_close with ops in flight (window buffers and copied ones): each op
// ends, done or failed with the client closed; none hangs or touches the
// unmapped window.
static void test_close_in_flight(const char *target) {
	enum { B = 32, S = 1 << 20 };
	char *own = malloc(S);
	memset(own, 7, S);
	uint32_t want = crc32c(own, S);
	for (int round = 0; round < 10; round++) {
		hec_client *c = dial(target);
		void *w;
		CODE(hec_alloc(c, S, &w), HEC_OK);
		memset(w, 7, S);
		uint32_t crc[B];
		hec_op *op[B];
		for (int i = 0; i < B; i++)
			CODE(hec_checksum_async(c, i % 2 ? own : w, S, &crc[i], &op[i]), HEC_OK);
		CODE(hec_close(c), HEC_OK);
		for (int i = 0; i < B; i++) {
			int rc = hec_wait(op[i], 20000);
			CHECK(rc == HEC_OK || rc == HEC_ECLOSED || rc == HEC_EUNREACHABLE, "op %d after close: %s", i, hec_strerror(rc));
			if (rc == HEC_OK)
				CHECK(crc[i] == want, "op %d: a checksum of %08x, want %08x", i, crc[i], want);
		}
	}
	free(own);
}

int main(int argc, char **argv) {
	if (argc == 3 && strcmp(argv[1], "--child") == 0)
		return child(argv[2]);
	if (argc != 4) {
		fprintf(stderr, "usage: %s SHM1 SHM2 SHM3 | --child SHM\n", argv[0]);
		return 2;
	}
	hec_client *cl[3];
	for (int i = 0; i < 3; i++)
		cl[i] = dial(argv[1 + i]);
	printf("libhec %s, window %zu bytes\n", hec_version(), hec_window_size(cl[0]));
	test_bad_arguments(cl[0]);
	printf("bad arguments: done\n");
	test_checksum(cl[0]);
	printf("checksum: done\n");
	test_kv(cl[0]);
	printf("kv: done\n");
	test_ec(cl[0], HEC_RAILS_HOST, 0);
	test_ec(cl[0], HEC_RAILS_DPU, 0);
	test_ec(cl[0], HEC_RAILS_DPU, 1);
	printf("ec: done\n");
	test_objects(cl[0], cl[1]);
	printf("objects: done\n");
	test_coll(cl);
	printf("coll: done\n");
	test_async_batch(cl[0]);
	printf("async batch: done\n");
	test_threads(cl[0]);
	printf("threads: done\n");
	test_killed_client(argv[0], argv[1], cl[0]);
	printf("killed client: done\n");
	test_close_in_flight(argv[1]);
	printf("close with ops in flight: done\n");
	for (int i = 0; i < 3; i++)
		CODE(hec_close(cl[i]), HEC_OK);
	CODE(hec_ping(cl[0]), HEC_EBADHANDLE);
	CODE(hec_close(cl[0]), HEC_EBADHANDLE);
	if (failures) {
		fprintf(stderr, "%d checks failed\n", failures);
		return 1;
	}
	printf("PASS\n");
	return 0;
}
