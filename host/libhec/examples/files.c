// files: the agent's CRC-32C of a file, read into the shared window (zero
// copy from there on), and the CRC kept in the agent's key-value store
// under the file's name, then read back.
//
//	gcc -Iinclude host/libhec/examples/files.c -Llib -lhec -Wl,-rpath,$PWD/lib -o files
//	./files FILE [TARGET]
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "hec.h"

static int fail(const char *what, int rc) {
	fprintf(stderr, "files: %s: %s: %s\n", what, hec_strerror(rc), hec_last_error());
	return 1;
}

int main(int argc, char **argv) {
	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE [TARGET]\n", argv[0]);
		return 2;
	}
	struct stat st;
	FILE *f = fopen(argv[1], "rb");
	if (!f || fstat(fileno(f), &st) != 0) {
		perror(argv[1]);
		return 1;
	}
	hec_client *c;
	int rc = hec_dial(argc > 2 ? argv[2] : NULL, NULL, 5000, &c);
	if (rc != HEC_OK)
		return fail("dial", rc);
	if ((rc = hec_ping(c)) != HEC_OK)
		return fail("ping", rc);

	// The file into a window buffer: the agent reads it where it lies.
	size_t n = (size_t)st.st_size;
	void *buf;
	if ((rc = hec_alloc(c, n ? n : 1, &buf)) != HEC_OK)
		return fail("alloc (a file larger than the window?)", rc);
	if (fread(buf, 1, n, f) != n) {
		perror("read");
		return 1;
	}
	fclose(f);
	uint32_t crc;
	if ((rc = hec_checksum(c, buf, n, &crc)) != HEC_OK)
		return fail("checksum", rc);
	hec_free(c, buf);

	char val[16], got[16];
	size_t len;
	snprintf(val, sizeof val, "%08x", crc);
	if ((rc = hec_kv_put(c, argv[1], strlen(argv[1]), val, strlen(val), 0)) != HEC_OK)
		return fail("kv put", rc);
	if ((rc = hec_kv_get(c, argv[1], strlen(argv[1]), got, sizeof got - 1, &len)) != HEC_OK)
		return fail("kv get", rc);
	got[len] = 0;
	printf("%s: %zu bytes, CRC-32C %s (kept in the agent's store: %s)\n", argv[1], n, val, got);
	return hec_close(c) == HEC_OK ? 0 : 1;
}
