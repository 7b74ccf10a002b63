// ec_bench: ISA-L's Reed-Solomon encode (the Cauchy matrix, one thread) as
// the peer of the ec scenario of test/bench. Built by the bench with gcc
// against Debian's libisal-dev; never committed as a binary.
//
//   ec_bench K M SIZE MIN_SECONDS
//
// codes an object of SIZE bytes (its data filled as the Go side fills it:
// byte i is (i*7 + i/4096) & 0xff) into K data and M parity shards of
// ceil(SIZE/K) rounded up to 64 bytes, once to warm up, then again and
// again for at least MIN_SECONDS, and prints one line:
//   runs N median_ns T fnv1a64 H
// T the median time of one encode, H the FNV-1a hash of the M parity
// shards in order (the Go side compares it with its own parity).
#include <isa-l/erasure_code.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv) {
	if (argc != 5) {
		fprintf(stderr, "usage: ec_bench K M SIZE MIN_SECONDS\n");
		return 2;
	}
	int k = atoi(argv[1]), m = atoi(argv[2]);
	long long size = atoll(argv[3]);
	double min_s = atof(argv[4]);
	if (k < 1 || m < 1 || k + m > 255 || size < 0) {
		fprintf(stderr, "ec_bench: bad shape\n");
		return 2;
	}
	long long s = (size + k - 1) / k;
	s = (s + 63) / 64 * 64;
	if (s < 64) s = 64;
	unsigned char *buf;
	if (posix_memalign((void **)&buf, 64, (size_t)s * (k + m)) != 0) return 1;
	memset(buf, 0, (size_t)s * (k + m));
	for (long long i = 0; i < size; i++) buf[i] = (unsigned char)((i * 7 + i / 4096) & 0xff);
	unsigned char *data[256], *coding[256];
	for (int i = 0; i < k; i++) data[i] = buf + (size_t)i * s;
	for (int i = 0; i < m; i++) coding[i] = buf + (size_t)(k + i) * s;
	unsigned char *a = malloc((size_t)(k + m) * k), *tbls = malloc((size_t)k * m * 32);
	gf_gen_cauchy1_matrix(a, k + m, k);
	ec_init_tables(k, m, &a[k * k], tbls);
	ec_encode_data((int)s, k, m, tbls, data, coding); /* warm up */
	int cap = 1 << 20, n = 0;
	int64_t *t = malloc(sizeof(int64_t) * cap);
	int64_t start = now_ns();
	while (n < 3 || (now_ns() - start < (int64_t)(min_s * 1e9) && n < cap)) {
		int64_t t0 = now_ns();
		ec_encode_data((int)s, k, m, tbls, data, coding);
		t[n++] = now_ns() - t0;
	}
	qsort(t, n, sizeof(int64_t), cmp);
	uint64_t h = 14695981039346656037ULL;
	for (long long i = 0; i < s * m; i++) {
		h ^= buf[(size_t)k * s + i];
		h *= 1099511628211ULL;
	}
	printf("runs %d median_ns %lld fnv1a64 %016llx\n", n, (long long)t[n / 2], (unsigned long long)h);
	return 0;
}
