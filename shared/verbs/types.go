package verbs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// ErrUnavailable wraps why verbs cannot be used here.
var ErrUnavailable = errors.New("verbs: unavailable")

// Endpoint is one end of a connection: what the other end's Connect needs.
type Endpoint struct {
	QPN uint32   // queue pair number (24 bits)
	PSN uint32   // first packet sequence number (24 bits)
	GID [16]byte // the port's address
}

// EndpointSize is an Endpoint's encoding's length.
const EndpointSize = 24

// Append appends e's encoding (little-endian QPN, PSN, then the GID).
func (e Endpoint) Append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, e.QPN)
	b = binary.LittleEndian.AppendUint32(b, e.PSN)
	return append(b, e.GID[:]...)
}

// ParseEndpoint decodes an Endpoint, checking its numbers' bounds.
func ParseEndpoint(b []byte) (Endpoint, error) {
	if len(b) != EndpointSize {
		return Endpoint{}, fmt.Errorf("verbs: an endpoint of %d bytes, want %d", len(b), EndpointSize)
	}
	e := Endpoint{QPN: binary.LittleEndian.Uint32(b), PSN: binary.LittleEndian.Uint32(b[4:])}
	copy(e.GID[:], b[8:])
	if e.QPN >= 1<<24 || e.PSN >= 1<<24 || e.QPN < 2 {
		return Endpoint{}, fmt.Errorf("verbs: endpoint with QPN %#x, PSN %#x", e.QPN, e.PSN)
	}
	return e, nil
}

// RemoteKey names a peer's registered memory: its address, length and
// key.
type RemoteKey struct {
	Addr, Len uint64
	RKey      uint32
}

// RemoteKeySize is a RemoteKey's encoding's length.
const RemoteKeySize = 20

// Append appends k's encoding (little-endian address, length, key): what
// a peer sends so that the other end may write and read its region.
func (k RemoteKey) Append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, k.Addr)
	b = binary.LittleEndian.AppendUint64(b, k.Len)
	return binary.LittleEndian.AppendUint32(b, k.RKey)
}

// ParseRemoteKey decodes a RemoteKey from the first RemoteKeySize bytes
// of b.
func ParseRemoteKey(b []byte) (RemoteKey, error) {
	if len(b) < RemoteKeySize {
		return RemoteKey{}, fmt.Errorf("verbs: a remote key of %d bytes, want %d", len(b), RemoteKeySize)
	}
	return RemoteKey{Addr: binary.LittleEndian.Uint64(b), Len: binary.LittleEndian.Uint64(b[8:]), RKey: binary.LittleEndian.Uint32(b[16:])}, nil
}

// Completion is one completed work request.
type Completion struct {
	ID     uint64
	Bytes  int // received (receives)
	Opcode int
	Imm    uint32
	HasImm bool
	Err    error // the request failed (nil: it succeeded)
}

// Work is one send-queue request.
type Work struct {
	Op       Op
	ID       uint64
	Region   *Region
	Off, Len int
	Remote   RemoteKey // Write, Read, WriteWithImm: where (Remote.Addr is the address itself)
	Imm      uint32
	Signaled bool // complete it on this side's queue (else only errors do)
}

// Op is a send queue's operation.
type Op int

const (
	Send         Op = 0 // to the peer's next posted receive
	Write        Op = 1 // into the peer's memory (RemoteKey), no completion there
	Read         Op = 2 // from the peer's memory into r
	WriteWithImm Op = 3 // Write, then the peer's next receive completes with Imm
)

func (o Op) String() string {
	switch o {
	case Send:
		return "send"
	case Write:
		return "write"
	case Read:
		return "read"
	case WriteWithImm:
		return "write with immediate"
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// framed is private data with its length first (the connection manager
// pads the field it arrives in).
func framed(b []byte) []byte { return append([]byte{byte(len(b))}, b...) }

// unframed is what framed framed, false when the field (untrusted: the
// peer's) holds no frame.
func unframed(b []byte) ([]byte, bool) {
	if len(b) == 0 || int(b[0]) > len(b)-1 {
		return nil, false
	}
	return b[1 : 1+int(b[0])], true
}

// MaxPrivate bounds the private data a connection request carries, and
// MaxPrivateReply an accept's. The connection manager hands the peer its
// transport's whole field (56 bytes of a request, 196 of a reply on
// InfiniBand and RoCE), zeros after what was sent: this package sends a
// length byte first, so that the peer gets what was sent.
const (
	MaxPrivate      = 55
	MaxPrivateReply = 195
)

// DeviceIPv4 is the IPv4 address of this machine's first RDMA device (its
// RoCE v2 GID): where the connection manager reaches it.
func DeviceIPv4() (netip.Addr, error) {
	d, err := Open("")
	if err != nil {
		return netip.Addr{}, err
	}
	defer d.Close()
	gid, _ := d.GID()
	if ip, ok := netip.AddrFromSlice(gid[:]); ok && ip.Unmap().Is4() {
		return ip.Unmap(), nil
	}
	return netip.Addr{}, fmt.Errorf("verbs: device %s: GID %x is not an IPv4 address's", d.Name, gid)
}
