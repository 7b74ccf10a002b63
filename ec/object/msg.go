package object

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind is what a Request asks of a store.
type Kind uint8

// The kinds of request.
const (
	KindPrepare Kind = 1 + iota // Meta: the version's Header; Index: the shard this store takes
	KindWrite                   // Name, Version, Index, Stripe, CRC, DataCRC, Data: one stripe's piece
	KindSeal                    // Name, Version, Index: every stripe written; make the shard durable
	KindCommit                  // Name, Version: the version reached its quorum
	KindAbort                   // Name, Version: forget a version not committed
	KindRead                    // Name, Version, Index, Stripe: Reply.Body is the piece
	KindStat                    // Name: Reply.Body is the JSON of every Shard held of it
	KindList                    // Name is a prefix: Reply.Body is the JSON of the newest committed Header of each name
	KindDelete                  // Meta: a tombstone's Header; Index: this store's place in it
	KindPurge                   // Name, Version: drop the tombstone once every agent has it
	KindReplace                 // as KindPrepare, for a repair: a sealed shard of the version may be there, and is replaced on seal
	KindPlace                   // Meta: the version's header with a new placement (an agent left); Index: this store's shard
	maxKind     = KindPlace
)

func (k Kind) String() string {
	names := [...]string{"", "prepare", "write", "seal", "commit", "abort", "read", "stat", "list", "delete", "purge", "replace", "place"}
	if int(k) < len(names) && k != 0 {
		return names[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Request is one message to a store. On the wire, little-endian:
//
//	0 kind u8 | 1 pad u8 | 2 index u16 | 4 stripe u32 | 8 crc u32 |
//	12 data crc u32 | 16 name length u16 | 18 version length u16 |
//	20 meta length u32 | 24 data length u32 | 28 name | version | meta | data
type Request struct {
	Kind    Kind
	Index   int
	Stripe  int
	CRC     uint32
	DataCRC uint32
	Name    string
	Version Version
	Meta    []byte
	Data    []byte
}

const requestHead = 28

// ErrMessage wraps every malformed message.
var ErrMessage = errors.New("object: bad message")

// Append appends r's encoding to b.
func (r *Request) Append(b []byte) []byte {
	var h [requestHead]byte
	h[0] = byte(r.Kind)
	binary.LittleEndian.PutUint16(h[2:], uint16(r.Index))
	binary.LittleEndian.PutUint32(h[4:], uint32(r.Stripe))
	binary.LittleEndian.PutUint32(h[8:], r.CRC)
	binary.LittleEndian.PutUint32(h[12:], r.DataCRC)
	binary.LittleEndian.PutUint16(h[16:], uint16(len(r.Name)))
	binary.LittleEndian.PutUint16(h[18:], uint16(len(r.Version)))
	binary.LittleEndian.PutUint32(h[20:], uint32(len(r.Meta)))
	binary.LittleEndian.PutUint32(h[24:], uint32(len(r.Data)))
	b = append(b, h[:]...)
	b = append(b, r.Name...)
	b = append(b, r.Version...)
	b = append(b, r.Meta...)
	return append(b, r.Data...)
}

// ParseRequest decodes a request. Meta and Data alias b.
func ParseRequest(b []byte) (Request, error) {
	if len(b) < requestHead {
		return Request{}, fmt.Errorf("%w: %d bytes", ErrMessage, len(b))
	}
	r := Request{
		Kind:    Kind(b[0]),
		Index:   int(binary.LittleEndian.Uint16(b[2:])),
		Stripe:  int(binary.LittleEndian.Uint32(b[4:])),
		CRC:     binary.LittleEndian.Uint32(b[8:]),
		DataCRC: binary.LittleEndian.Uint32(b[12:]),
	}
	if r.Kind == 0 || r.Kind > maxKind {
		return Request{}, fmt.Errorf("%w: kind %d", ErrMessage, b[0])
	}
	nl, vl := uint64(binary.LittleEndian.Uint16(b[16:])), uint64(binary.LittleEndian.Uint16(b[18:]))
	ml, dl := uint64(binary.LittleEndian.Uint32(b[20:])), uint64(binary.LittleEndian.Uint32(b[24:]))
	if requestHead+nl+vl+ml+dl != uint64(len(b)) {
		return Request{}, fmt.Errorf("%w: lengths %d+%d+%d+%d in %d bytes", ErrMessage, nl, vl, ml, dl, len(b)-requestHead)
	}
	p := b[requestHead:]
	r.Name, p = string(p[:nl]), p[nl:]
	r.Version, p = Version(p[:vl]), p[vl:]
	r.Meta, p = p[:ml:ml], p[ml:]
	r.Data = p[:dl:dl]
	if nl > MaxName || (r.Kind != KindList && nl == 0) {
		return Request{}, fmt.Errorf("%w: name of %d bytes", ErrMessage, nl)
	}
	return r, nil
}

// Status is a Reply's outcome.
type Status uint8

// Statuses of a reply.
const (
	StatusOK       Status = 0
	StatusNotFound Status = 1 // no such object, version or shard here
	StatusBad      Status = 2 // the request contradicts itself or what the store holds
	StatusCorrupt  Status = 3 // the piece on disk fails its CRC
	StatusFailed   Status = 4 // the store failed (its disk)
	StatusTooLarge Status = 5
)

// Reply is a store's answer. On the wire: status u8 | pad | message
// length u16 | crc u32 | data crc u32 | message | body.
type Reply struct {
	Status  Status
	CRC     uint32
	DataCRC uint32
	Msg     string
	Body    []byte
}

const replyHead = 12

// Append appends r's encoding to b.
func (r *Reply) Append(b []byte) []byte {
	msg := r.Msg
	if len(msg) > 1<<12 {
		msg = msg[:1<<12]
	}
	var h [replyHead]byte
	h[0] = byte(r.Status)
	binary.LittleEndian.PutUint16(h[2:], uint16(len(msg)))
	binary.LittleEndian.PutUint32(h[4:], r.CRC)
	binary.LittleEndian.PutUint32(h[8:], r.DataCRC)
	b = append(b, h[:]...)
	b = append(b, msg...)
	return append(b, r.Body...)
}

// ParseReply decodes a reply; Body aliases b.
func ParseReply(b []byte) (Reply, error) {
	if len(b) < replyHead {
		return Reply{}, fmt.Errorf("%w: reply of %d bytes", ErrMessage, len(b))
	}
	ml := int(binary.LittleEndian.Uint16(b[2:]))
	if replyHead+ml > len(b) {
		return Reply{}, fmt.Errorf("%w: reply message of %d bytes in %d", ErrMessage, ml, len(b)-replyHead)
	}
	r := Reply{Status: Status(b[0]), CRC: binary.LittleEndian.Uint32(b[4:]), DataCRC: binary.LittleEndian.Uint32(b[8:]),
		Msg: string(b[replyHead : replyHead+ml]), Body: b[replyHead+ml:]}
	if r.Status > StatusTooLarge {
		return Reply{}, fmt.Errorf("%w: status %d", ErrMessage, b[0])
	}
	return r, nil
}

// Err is the reply's error (nil when OK), wrapping the package's error of
// its status.
func (r *Reply) Err() error {
	switch r.Status {
	case StatusOK:
		return nil
	case StatusNotFound:
		return fmt.Errorf("%w: %s", ErrNotFound, r.Msg)
	case StatusBad:
		return fmt.Errorf("%w: %s", ErrShard, r.Msg)
	case StatusCorrupt:
		return fmt.Errorf("%w: %s", ErrCorrupt, r.Msg)
	case StatusTooLarge:
		return fmt.Errorf("%w: %s", ErrTooLarge, r.Msg)
	}
	return fmt.Errorf("object: store failed: %s", r.Msg)
}

// replyFor maps an error to a reply.
func replyFor(err error) Reply {
	st := StatusFailed
	switch {
	case errors.Is(err, ErrNotFound):
		st = StatusNotFound
	case errors.Is(err, ErrCorrupt):
		st = StatusCorrupt
	case errors.Is(err, ErrTooLarge):
		st = StatusTooLarge
	case errors.Is(err, ErrShard), errors.Is(err, ErrBadMeta), errors.Is(err, ErrName), errors.Is(err, ErrMessage):
		st = StatusBad
	}
	return Reply{Status: st, Msg: err.Error()}
}
