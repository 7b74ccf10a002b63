package wire

import "fmt"

// Op is an operation code. Codes are grouped by service in blocks of 0x100 so
// that services added later (erasure coding, collectives) plug in without
// renumbering: 0x00xx agent, 0x01xx kv, 0x02xx ec, 0x03xx coll.
type Op uint16

const (
	// OpInvalid is the zero value; a descriptor carrying it is rejected.
	OpInvalid Op = 0
	// OpPing completes at once with StatusOK; Arg0 is echoed.
	OpPing Op = 0x0001
	// OpChecksum computes the CRC-32C (Castagnoli) of Spans[0]; the result is
	// in the completion's Arg0. Arg0 of the request is the initial CRC.
	OpChecksum Op = 0x0002

	// OpKVBase .. OpKVBase+0xff are reserved for the kv service.
	OpKVBase Op = 0x0100

	// OpKVGet: Spans[0] key, Spans[1] room for the value. Completes with
	// Arg0 = the value's length, Arg1 = its version, Spans[0] = the bytes
	// written; StatusNotFound; or StatusTooLarge with Arg0 = the length
	// needed (nothing written).
	OpKVGet Op = OpKVBase + 1
	// OpKVPut: Spans[0] key, Spans[1] value, Arg0 = TTL in milliseconds
	// (0: none), Arg1 = KVIfAbsent or KVIfPresent. StatusExists /
	// StatusNotFound when the condition fails.
	OpKVPut Op = OpKVBase + 2
	// OpKVDelete: Spans[0] key. Arg0 = 1 when it existed.
	OpKVDelete Op = OpKVBase + 3
	// OpKVScan: Spans[0] prefix, Spans[1] cursor (empty: from the start),
	// Spans[2] room for the results, Arg0 = the most pairs to return.
	// Completes with Arg0 = pairs, Spans[0] = records {u32 key length,
	// u32 value length, key, value}... and Spans[1] = the next cursor
	// (length 0: done), both in the room given.
	OpKVScan Op = OpKVBase + 4
	// OpKVBatch: Spans[0] records {u8 kind (0 put, 1 delete), u32 key
	// length, u32 value length, u64 TTL ms, key, value}...: applied
	// atomically, all or none.
	OpKVBatch Op = OpKVBase + 5
	// OpECBase .. OpECBase+0xff are reserved for the ec service.
	OpECBase Op = 0x0200
	// OpCollBase .. OpCollBase+0xff are reserved for the coll service.
	OpCollBase Op = 0x0300
)

// Flags of OpKVPut's Arg1.
const (
	KVIfAbsent  = 1 << 0
	KVIfPresent = 1 << 1
)

// opNames name the ops for String and metrics labels: a service adds its
// ops here, beside their codes.
var opNames = map[Op]string{
	OpInvalid:  "invalid",
	OpPing:     "ping",
	OpChecksum: "checksum",
	OpKVGet:    "kv_get",
	OpKVPut:    "kv_put",
	OpKVDelete: "kv_delete",
	OpKVScan:   "kv_scan",
	OpKVBatch:  "kv_batch",
}

func (o Op) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return fmt.Sprintf("op(%#04x)", uint16(o))
}
