// Ping the agent (make run starts one): gcc -Iinclude host/libhec/examples/ping.c -Llib -lhec -o ping
#include <stdio.h>
#include "hec.h"

int main(int argc, char **argv) {
	hec_client *c;
	int rc = hec_dial(argc > 1 ? argv[1] : NULL, NULL, 5000, &c);
	if (rc == HEC_OK && (rc = hec_ping(c)) == HEC_OK)
		printf("agent answered (libhec %s)\n", hec_version());
	else
		fprintf(stderr, "ping: %s: %s\n", hec_strerror(rc), hec_last_error());
	return rc == HEC_OK ? hec_close(c) : 1;
}
