package rdmalink

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hecsys/hec/shared/verbs"
)

// The RDMA handoff (rdma://HOST:PORT) sets up as follows, then runs the
// handoff's descriptors (wire.DescSize bytes) as messages each way: the
// host's requests name spans of its window, which the agent reads with
// RDMA READ and writes with RDMA WRITE before it sends the completion.
//
//	connect request (private data): HandoffMagic | version
//	accept reply (private data):    HandoffMagic | version | flags | max window u64 | slots u16 | slot size u16
//	host → agent, first message:    HandoffMagic | version | the window's verbs.RemoteKey
//	agent → host:                   status (0: accepted) | why not
//	with HandoffToken: wire.AuthAgent / wire.AuthHost over messages (Messages)
//
// Numbers are little-endian.

// HandoffMagic opens the handoff's setup messages.
var HandoffMagic = [4]byte{'H', 'E', 'C', 'R'}

// HandoffVersion is the setup's version.
const HandoffVersion = 1

// HandoffToken: the agent asks for the operator's token.
const HandoffToken = 1

// HandoffSlotSize is the handoff's message slot: a descriptor, or a
// handshake's message (at most 64 bytes), or the agent's refusal.
const HandoffSlotSize = 128

// ErrHandoff wraps a malformed setup message.
var ErrHandoff = errors.New("rdmalink: not an RDMA handoff")

// Request is the connect request's private data.
func Request() []byte { return append(HandoffMagic[:], HandoffVersion) }

// CheckRequest checks a connect request's private data.
func CheckRequest(b []byte) error {
	if len(b) < 5 || [4]byte(b[:4]) != HandoffMagic {
		return fmt.Errorf("%w: connect request without the handoff's magic", ErrHandoff)
	}
	if b[4] != HandoffVersion {
		return fmt.Errorf("%w: version %d, this agent speaks %d", ErrHandoff, b[4], HandoffVersion)
	}
	return nil
}

// Accept is the agent's accept reply.
type Accept struct {
	Flags     uint8
	MaxWindow uint64 // the largest window the agent mirrors
	Slots     uint16 // messages in flight each way
	SlotSize  uint16
}

const acceptSize = 4 + 1 + 1 + 8 + 2 + 2

func (a Accept) Append(b []byte) []byte {
	b = append(append(b, HandoffMagic[:]...), HandoffVersion, a.Flags)
	b = binary.LittleEndian.AppendUint64(b, a.MaxWindow)
	b = binary.LittleEndian.AppendUint16(b, a.Slots)
	return binary.LittleEndian.AppendUint16(b, a.SlotSize)
}

// ParseAccept decodes (and bounds) an accept reply.
func ParseAccept(b []byte) (Accept, error) {
	if len(b) < acceptSize || [4]byte(b[:4]) != HandoffMagic || b[4] != HandoffVersion {
		return Accept{}, fmt.Errorf("%w: accept reply of %d bytes", ErrHandoff, len(b))
	}
	a := Accept{Flags: b[5], MaxWindow: binary.LittleEndian.Uint64(b[6:]), Slots: binary.LittleEndian.Uint16(b[14:]), SlotSize: binary.LittleEndian.Uint16(b[16:])}
	if a.Slots == 0 || a.Slots > 4096 || a.SlotSize < HandoffSlotSize || a.MaxWindow == 0 {
		return Accept{}, fmt.Errorf("%w: accept reply with %d slots of %d bytes, window %d", ErrHandoff, a.Slots, a.SlotSize, a.MaxWindow)
	}
	return a, nil
}

// Hello is the host's first message: its window.
func Hello(window verbs.RemoteKey) []byte {
	return window.Append(append(HandoffMagic[:], HandoffVersion))
}

// ParseHello decodes the host's first message.
func ParseHello(b []byte) (verbs.RemoteKey, error) {
	if len(b) != 5+verbs.RemoteKeySize || [4]byte(b[:4]) != HandoffMagic || b[4] != HandoffVersion {
		return verbs.RemoteKey{}, fmt.Errorf("%w: a first message of %d bytes", ErrHandoff, len(b))
	}
	return verbs.ParseRemoteKey(b[5:])
}
