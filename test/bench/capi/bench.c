// The capi scenario's C client: PING round trips and CHECKSUMs of a 64 MiB
// window buffer through libhec, printed as one line:
//	ping_p50_ns N ping_p99_ns N checksum_gbs X
// usage: bench TARGET PINGS
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hec.h"

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int die(const char *what, int rc) {
	fprintf(stderr, "bench: %s: %s: %s\n", what, hec_strerror(rc), hec_last_error());
	return 1;
}

int main(int argc, char **argv) {
	if (argc != 3)
		return fprintf(stderr, "usage: %s TARGET PINGS\n", argv[0]), 2;
	int n = atoi(argv[2]), rc;
	hec_client *c;
	if ((rc = hec_dial(argv[1], NULL, 10000, &c)) != HEC_OK)
		return die("dial", rc);
	double *d = malloc(n * sizeof *d);
	for (int i = 0; i < n / 10; i++)
		if ((rc = hec_ping(c)) != HEC_OK)
			return die("ping", rc);
	double prev = now();
	for (int i = 0; i < n; i++) {
		if ((rc = hec_ping(c)) != HEC_OK)
			return die("ping", rc);
		double t = now();
		d[i] = t - prev;
		prev = t;
	}
	qsort(d, n, sizeof *d, cmp);
	size_t size = 64 << 20;
	unsigned char *buf;
	if ((rc = hec_alloc(c, size, (void **)&buf)) != HEC_OK)
		return die("alloc", rc);
	for (size_t i = 0; i < size; i++)
		buf[i] = (unsigned char)((i & 0xFFFF) * 31 + ((i & 0xFFFF) >> 8)); // as bench.py and the Go client
	double t[15];
	uint32_t crc;
	for (int r = 0; r < 15; r++) {
		double t0 = now();
		if ((rc = hec_checksum(c, buf, size, &crc)) != HEC_OK)
			return die("checksum", rc);
		t[r] = now() - t0;
	}
	qsort(t, 15, sizeof *t, cmp);
	printf("ping_p50_ns %.0f ping_p99_ns %.0f checksum_gbs %.3f crc %08x\n", d[n / 2] * 1e9, d[n * 99 / 100] * 1e9,
	       size / t[7] / 1e9, crc);
	hec_free(c, buf);
	free(d);
	return hec_close(c) == HEC_OK ? 0 : 1;
}
