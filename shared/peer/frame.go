package peer

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Type is a frame's type.
type Type uint8

const (
	TypeHello     Type = 1 // handshake, one each way
	TypeData      Type = 2 // payload for a communicator or object
	TypeAbort     Type = 3 // the communicator's work is abandoned (payload: reason)
	TypePing      Type = 4 // answered by a Pong with the same payload
	TypePong      Type = 5
	TypeHeartbeat Type = 6 // keeps an idle connection's peer alive
	TypeAck       Type = 7 // an application-level acknowledgement
	TypeRequest   Type = 8 // a request to a service of the peer (Call), answered by a Reply
	TypeReply     Type = 9
	maxType            = TypeReply
)

func (t Type) String() string {
	switch t {
	case TypeHello:
		return "hello"
	case TypeData:
		return "data"
	case TypeAbort:
		return "abort"
	case TypePing:
		return "ping"
	case TypePong:
		return "pong"
	case TypeHeartbeat:
		return "heartbeat"
	case TypeAck:
		return "ack"
	case TypeRequest:
		return "request"
	case TypeReply:
		return "reply"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Wire constants.
const (
	Magic      = 0x4845 // "HE"
	Version    = 1
	HeaderSize = 40
	TagSize    = 16
	// MaxPayload bounds one frame; larger messages are several frames.
	MaxPayload = 4 << 20
)

// FlagLast marks the last frame of a message of several.
const FlagLast = 1

// Header is a frame's header. On the wire, little-endian:
//
//	0 magic u16 | 2 version u8 | 3 type u8 | 4 length u32 | 8 sender u32 |
//	12 flags u32 | 16 epoch u64 | 24 comm u64 | 32 seq u64
type Header struct {
	Type   Type
	Length uint32 // payload bytes
	Sender uint32 // node id
	Flags  uint32
	Epoch  uint64
	Comm   uint64 // communicator or object id
	Seq    uint64 // per connection and direction, from 1
}

// ErrFrame wraps every malformed-frame error.
var ErrFrame = errors.New("peer: bad frame")

// Put writes h into b[:HeaderSize].
func (h *Header) Put(b []byte) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint16(b[0:], Magic)
	b[2] = Version
	b[3] = byte(h.Type)
	binary.LittleEndian.PutUint32(b[4:], h.Length)
	binary.LittleEndian.PutUint32(b[8:], h.Sender)
	binary.LittleEndian.PutUint32(b[12:], h.Flags)
	binary.LittleEndian.PutUint64(b[16:], h.Epoch)
	binary.LittleEndian.PutUint64(b[24:], h.Comm)
	binary.LittleEndian.PutUint64(b[32:], h.Seq)
}

// ParseHeader reads and checks a header: magic, version, a known type and
// a length within MaxPayload.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d header bytes", ErrFrame, len(b))
	}
	if m := binary.LittleEndian.Uint16(b[0:]); m != Magic {
		return Header{}, fmt.Errorf("%w: magic %#x", ErrFrame, m)
	}
	if b[2] != Version {
		return Header{}, fmt.Errorf("%w: version %d", ErrFrame, b[2])
	}
	h := Header{
		Type:   Type(b[3]),
		Length: binary.LittleEndian.Uint32(b[4:]),
		Sender: binary.LittleEndian.Uint32(b[8:]),
		Flags:  binary.LittleEndian.Uint32(b[12:]),
		Epoch:  binary.LittleEndian.Uint64(b[16:]),
		Comm:   binary.LittleEndian.Uint64(b[24:]),
		Seq:    binary.LittleEndian.Uint64(b[32:]),
	}
	if h.Type == 0 || h.Type > maxType {
		return Header{}, fmt.Errorf("%w: type %d", ErrFrame, h.Type)
	}
	if h.Length > MaxPayload {
		return Header{}, fmt.Errorf("%w: payload of %d bytes", ErrFrame, h.Length)
	}
	return h, nil
}
