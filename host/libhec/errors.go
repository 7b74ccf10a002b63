package main

/*
#define HEC_NO_PROTOTYPES
#include "hec.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"github.com/hecsys/hec/ec"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/ring"
	"github.com/hecsys/hec/shared/wire"
)

// codeErr is an error with the code it is answered with.
type codeErr struct {
	code C.int
	err  error
}

func (e *codeErr) Error() string { return e.err.Error() }
func (e *codeErr) Unwrap() error { return e.err }

// fail makes an error answered with code.
func fail(code C.int, format string, a ...any) error {
	return &codeErr{code, fmt.Errorf("libhec: "+format, a...)}
}

// codeOf maps an error of package host (or of this package) to its code.
func codeOf(err error) C.int {
	var ce *codeErr
	var st wire.Status
	switch {
	case err == nil:
		return C.HEC_OK
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, host.ErrClosed):
		return C.HEC_ECLOSED
	case errors.Is(err, host.ErrDenied):
		return C.HEC_EDENIED
	case errors.Is(err, host.ErrTarget), errors.Is(err, host.ErrRails):
		return C.HEC_EINVAL
	case errors.Is(err, host.ErrUnreachable), errors.Is(err, host.ErrAgentDead), errors.Is(err, fs.ErrNotExist),
		errors.Is(err, syscall.ECONNREFUSED):
		return C.HEC_EUNREACHABLE
	case errors.Is(err, context.DeadlineExceeded):
		return C.HEC_ETIMEDOUT
	case errors.Is(err, ring.ErrNoSpace):
		return C.HEC_ENOMEM
	case errors.Is(err, ec.ErrCorrupt):
		return C.HEC_ECORRUPT
	case errors.Is(err, ec.ErrShardSize), errors.Is(err, ec.ErrShardCount), errors.Is(err, ec.ErrTooFewShards):
		return C.HEC_EINVAL
	case errors.As(err, &st):
		switch st {
		case wire.StatusNotFound:
			return C.HEC_ENOTFOUND
		case wire.StatusExists:
			return C.HEC_EEXIST
		case wire.StatusBadArg, wire.StatusBadSpan, wire.StatusTooLarge:
			return C.HEC_EINVAL
		case wire.StatusDenied:
			return C.HEC_EDENIED
		case wire.StatusClosed:
			return C.HEC_ECLOSED
		case wire.StatusTimeout:
			return C.HEC_ETIMEDOUT
		case wire.StatusUnavailable, wire.StatusRestarted, wire.StatusFenced:
			return C.HEC_EUNREACHABLE
		}
	}
	if host.IsNotFound(err) {
		return C.HEC_ENOTFOUND
	}
	return C.HEC_EAGENT
}
