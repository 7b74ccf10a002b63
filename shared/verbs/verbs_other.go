//go:build !linux || !cgo

package verbs

import (
	"context"
	"fmt"
	"net/netip"
	"time"
)

// Available says why verbs cannot be used: this build has no cgo.
func Available() error {
	return fmt.Errorf("%w: built without cgo (CGO_ENABLED=0): the RDMA transport needs libibverbs through cgo", ErrUnavailable)
}

// Device is an RDMA device; without cgo none opens.
type Device struct {
	Name string
	Port int
}

// Open fails: see Available.
func Open(string) (*Device, error) { return nil, Available() }

// GID is zero.
func (*Device) GID() ([16]byte, int) { return [16]byte{}, 0 }

// MTU is 0.
func (*Device) MTU() int { return 0 }

// Close does nothing.
func (*Device) Close() error { return nil }

// Region is registered memory; without cgo none is.
type Region struct{ Buf []byte }

// Register fails: see Available.
func (*Device) Register(int) (*Region, error) { return nil, Available() }

// Key is zero.
func (*Region) Key() RemoteKey { return RemoteKey{} }

// Close does nothing.
func (*Region) Close() error { return nil }

// QP is a queue pair; without cgo none is made.
type QP struct{}

// NewQP fails: see Available.
func (*Device) NewQP(int) (*QP, error) { return nil, Available() }

// Local is zero.
func (*QP) Local() Endpoint { return Endpoint{} }

// Connect fails: see Available.
func (*QP) Connect(Endpoint) error { return Available() }

// Close does nothing.
func (*QP) Close() error { return nil }

// PostRecv fails: see Available.
func (*QP) PostRecv(*Region, int, int, uint64) error { return Available() }

// Post fails: see Available.
func (*QP) Post(Work) error { return Available() }

// Poll fails: see Available.
func (*QP) Poll(out []Completion) ([]Completion, error) { return out, Available() }

// Arm says why there is no queue.
func (*QP) Arm() error { return Available() }

// WaitEvent says why there is no queue.
func (*QP) WaitEvent(time.Duration) (bool, error) { return false, Available() }

// Conn is an RDMA connection; without cgo none is made.
type Conn struct {
	Device *Device
	QP     *QP
}

// Dial fails: see Available.
func Dial(context.Context, netip.AddrPort, []byte, int) (*Conn, []byte, error) {
	return nil, nil, Available()
}

// Close does nothing.
func (*Conn) Close() error { return nil }

// WaitDisconnected returns at once: there is no connection.
func (*Conn) WaitDisconnected(context.Context) error { return nil }

// Listener takes RDMA connections; without cgo none listens.
type Listener struct{}

// Listen fails: see Available.
func Listen(netip.AddrPort) (*Listener, error) { return nil, Available() }

// Accept fails: see Available.
func (*Listener) Accept(context.Context, int, func([]byte) ([]byte, error)) (*Conn, error) {
	return nil, Available()
}

// Close does nothing.
func (*Listener) Close() error { return nil }
