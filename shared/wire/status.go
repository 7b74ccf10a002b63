package wire

import (
	"errors"
	"fmt"
)

// Status is the outcome of an operation, carried in a completion. Zero is
// success. Codes with the retryable bit (0x8000) set mean the same request
// may succeed if submitted again (after re-attaching, for StatusRestarted);
// the others are permanent for that request.
//
// Status implements error, so a caller can write
// errors.Is(err, wire.StatusNotFound).
type Status uint16

// RetryableBit marks statuses whose request may succeed when retried.
const RetryableBit Status = 0x8000

const (
	StatusOK          Status = 0
	StatusBadOp       Status = 1  // unknown or unserved op
	StatusBadSpan     Status = 2  // a span lies outside the window or payload
	StatusBadArg      Status = 3  // flags, counts or arguments malformed
	StatusNotFound    Status = 4  // the key or object does not exist
	StatusTooLarge    Status = 5  // a size exceeds a configured limit
	StatusExists      Status = 6  // a conditional write found the key present
	StatusInternal    Status = 7  // the agent failed; see its log
	StatusUnsupported Status = 8  // the agent knows the op but cannot serve it here
	StatusMismatch    Status = 9  // a compare-and-swap found another value
	StatusFaulted     Status = 10 // the queue pair is faulted and must be reset
	StatusClosed      Status = 11 // the client was closed
	StatusReadOnly    Status = 12 // the store refuses writes after a failed disk write, until the agent restarts
	StatusDenied      Status = 13 // the agent wants the operator's token, or another one (host side: the agent closes the connection)

	StatusBusy        Status = RetryableBit | 1 // resources exhausted for now
	StatusRestarted   Status = RetryableBit | 2 // the agent restarted; re-attach and retry
	StatusUnavailable Status = RetryableBit | 3 // the agent or service is not reachable
	StatusFenced      Status = RetryableBit | 4 // the lease was fenced under the request
	StatusTimeout     Status = RetryableBit | 5 // no completion within the deadline
	StatusNoSpace     Status = RetryableBit | 6 // the store's disk is full; writes resume once space returns
)

var statusNames = map[Status]string{
	StatusOK:          "ok",
	StatusBadOp:       "bad op",
	StatusBadSpan:     "bad span",
	StatusBadArg:      "bad argument",
	StatusNotFound:    "not found",
	StatusTooLarge:    "too large",
	StatusExists:      "exists",
	StatusInternal:    "internal error",
	StatusUnsupported: "unsupported",
	StatusMismatch:    "mismatch",
	StatusFaulted:     "queue pair faulted",
	StatusClosed:      "closed",
	StatusReadOnly:    "writes refused after a failed disk write",
	StatusDenied:      "not authenticated",
	StatusBusy:        "busy",
	StatusRestarted:   "agent restarted",
	StatusUnavailable: "unavailable",
	StatusFenced:      "lease fenced",
	StatusTimeout:     "timeout",
	StatusNoSpace:     "disk full",
}

// Retryable reports whether a request that completed with s may succeed if
// submitted again.
func (s Status) Retryable() bool { return s&RetryableBit != 0 }

func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("status(%#04x)", uint16(s))
}

// Error makes a Status usable as an error value and as an errors.Is target.
func (s Status) Error() string { return "wire: " + s.String() }

// Err returns nil for StatusOK and s otherwise.
func (s Status) Err() error {
	if s == StatusOK {
		return nil
	}
	return s
}

// OpError is the error a client returns for an op that completed with a
// status other than StatusOK.
type OpError struct {
	Op     Op
	Status Status
}

func (e *OpError) Error() string { return fmt.Sprintf("wire: %s: %s", e.Op, e.Status.String()) }

// Unwrap lets errors.Is(err, wire.StatusNotFound) match.
func (e *OpError) Unwrap() error { return e.Status }

// IsRetryable reports whether err carries a retryable Status.
func IsRetryable(err error) bool {
	var s Status
	return errors.As(err, &s) && s.Retryable()
}
