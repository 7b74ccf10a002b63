//go:build !linux || !cgo

package verbs

import "fmt"

// Available says why verbs cannot be used: this build has no cgo.
func Available() error {
	return fmt.Errorf("%w: built without cgo (CGO_ENABLED=0): the RDMA transport needs libibverbs through cgo", ErrUnavailable)
}

// Device is an RDMA device; without cgo none opens.
type Device struct{ Name string }

// Open fails: see Available.
func Open(string) (*Device, error) { return nil, Available() }

// Conn is an RDMA connection; without cgo none is made.
type Conn struct{}

// Close does nothing.
func (*Conn) Close() error { return nil }

// Listener takes RDMA connections; without cgo none listens.
type Listener struct{}

// Close does nothing.
func (*Listener) Close() error { return nil }
