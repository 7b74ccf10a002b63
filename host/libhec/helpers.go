package main

// The C side of libhec, defined here (a file without //export, whose
// preamble is compiled once): the per-thread message of the last failed
// call, the names of the codes, the handles' disguise as pointers, and the
// version string's home.

/*
#cgo CFLAGS: -I${SRCDIR}
#define HEC_NO_PROTOTYPES
#include <string.h>

#include "hec.h"

static __thread char last_error[512];

void hec__set_error(const char *msg, size_t n) {
	if (n >= sizeof last_error)
		n = sizeof last_error - 1;
	memcpy(last_error, msg, n);
	last_error[n] = 0;
}

const char *hec_last_error(void) { return last_error; }

const char *hec_strerror(int code) {
	switch (code) {
	case HEC_OK: return "ok";
	case HEC_EINVAL: return "invalid argument";
	case HEC_EBADHANDLE: return "bad handle (NULL, closed or unknown)";
	case HEC_ENOTFOUND: return "not found";
	case HEC_ERANGE: return "buffer too small, or a length past its end";
	case HEC_ENOMEM: return "the shared window is full";
	case HEC_EUNREACHABLE: return "the agent is unreachable";
	case HEC_EDENIED: return "denied: the agent wants a (different) token";
	case HEC_ETIMEDOUT: return "timed out";
	case HEC_ECLOSED: return "the client was closed";
	case HEC_EEXIST: return "already exists";
	case HEC_EAGAIN: return "not finished yet";
	case HEC_ECORRUPT: return "corrupted (a checksum failed)";
	case HEC_EAGENT: return "refused or failed by the agent";
	case HEC_EINTERNAL: return "internal error in libhec";
	}
	return "unknown error code";
}

void *hec__handle(uintptr_t id) { return (void *)id; }

// hec__version keeps the version in static memory (C owns nothing to free).
const char *hec__version(const char *v, size_t n) {
	static char version[128];
	if (!version[0]) {
		if (n >= sizeof version)
			n = sizeof version - 1;
		memcpy(version, v, n);
		version[n] = 0;
	}
	return version;
}
*/
import "C"
