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

	// OpECEncode computes Reed-Solomon parity (Cauchy matrix) in place.
	// Arg0 = ECShards(k, m). Plain form: Spans[0] holds the k data shards
	// of w bytes back to back, Spans[1] room for the m parity shards
	// (m·w bytes). With FlagSGL, Spans[0] names a list of k+m spans of w
	// bytes each: the data shards, then the parity shards. Completes with
	// Arg0 = w and, in the plain form, Spans[0] = the parity written.
	OpECEncode Op = OpECBase + 1
	// OpECReconstruct rebuilds shards from any k others. Arg0 =
	// ECShards(k, m). Plain form: Spans[0] holds k present shards of w
	// bytes back to back, Spans[1] k+r one-byte shard indices (the k
	// present ones in that order, then the r to rebuild), Spans[2] room
	// for the r rebuilt shards. With FlagSGL, Spans[0] names a list of
	// k+r+1 spans: the k present shards, the r to rebuild (w bytes each),
	// then the index bytes. Completes with Arg0 = w and, in the plain
	// form, Spans[0] = the shards written.
	OpECReconstruct Op = OpECBase + 2

	// Erasure-coded objects across agents (the agent codes and places;
	// package ec/object). An op that fails with a reason writes it, as
	// text, into its last span when that is room (Arg1 = its length).
	//
	// OpECPutBegin starts a Put: Spans[0] the name, Arg0 the size,
	// Arg1 ECShards(k, m) or 0 for the agent's code. Arg0 = the Put's
	// handle.
	OpECPutBegin Op = OpECBase + 0x10
	// OpECPutData: Arg0 the handle, Arg1 the offset of Spans[0]'s bytes in
	// the object (in order: the bytes given so far). Completes once the
	// bytes are taken (coded and on their way when a stripe fills).
	OpECPutData Op = OpECBase + 0x11
	// OpECPutEnd: Arg0 the handle, Arg1 = 1 to abort. Spans[0] room for
	// the version (32 bytes). Completes once a write quorum committed.
	OpECPutEnd Op = OpECBase + 0x12
	// OpECGet: Spans[0] the name, Spans[1] the version (from OpECStat),
	// Spans[2] room, Arg0 the offset. Arg0 = bytes written into the room,
	// Arg1 = how many things the agent found wrong reading it (shards
	// missing, unreachable, corrupt: OpECStat says which); StatusNotFound
	// when the version is gone (superseded): stat again.
	OpECGet Op = OpECBase + 0x13
	// OpECStat: Spans[0] the name, Spans[1] room for the JSON of
	// object.Stat; StatusTooLarge with Arg0 = the room needed.
	OpECStat Op = OpECBase + 0x14
	// OpECDelete: Spans[0] the name, Spans[1] room for a reason.
	OpECDelete Op = OpECBase + 0x15
	// OpECList: Spans[0] a name prefix, Spans[1] room for the JSON of the
	// objects' headers; StatusTooLarge with Arg0 = the room needed.
	OpECList Op = OpECBase + 0x16
	// OpECShard: Spans[0] an encoded object.Request to this agent's shard
	// store, Spans[1] room for its encoded reply (Arg0 = its length): the
	// path of a client that codes and places shards itself.
	OpECShard Op = OpECBase + 0x17
	// OpCollBase .. OpCollBase+0xff are the coll service's: collectives
	// the agents run among themselves over the peer layer, on the host's
	// buffers.
	OpCollBase Op = 0x0300
	// OpCollJoin makes this agent a rank of a communicator: Spans[0] an
	// encoded CollSpec (its id, epoch and the ranks' agents, this one
	// among them). Joining an id again replaces the communicator.
	OpCollJoin Op = OpCollBase + 1
	// OpCollRun runs one collective: Arg0 the communicator's id, Arg1
	// CollArgs; Spans[0] the send buffer, Spans[1] the receive buffer
	// (written), Spans[2] room for a reason (naming the rank that failed)
	// when it fails. Completes when the collective has.
	OpCollRun Op = OpCollBase + 2
	// OpCollLeave drops a communicator: Arg0 its id.
	OpCollLeave Op = OpCollBase + 3
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

	OpECEncode:      "ec_encode",
	OpECReconstruct: "ec_reconstruct",
	OpECPutBegin:    "ec_put_begin",
	OpECPutData:     "ec_put_data",
	OpECPutEnd:      "ec_put_end",
	OpECGet:         "ec_get",
	OpECStat:        "ec_stat",
	OpECDelete:      "ec_delete",
	OpECList:        "ec_list",
	OpECShard:       "ec_shard",

	OpCollJoin:  "coll_join",
	OpCollRun:   "coll_run",
	OpCollLeave: "coll_leave",
}

// ECShards packs the shard counts of an EC op into its Arg0.
func ECShards(k, m int) uint64 { return uint64(k)&0xffff | (uint64(m)&0xffff)<<16 }

// ECShardsOf unpacks ECShards; ok is false when bits beyond the two counts
// are set. The counts themselves are the service's to check.
func ECShardsOf(arg uint64) (k, m int, ok bool) {
	return int(arg & 0xffff), int(arg >> 16 & 0xffff), arg>>32 == 0
}

func (o Op) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return fmt.Sprintf("op(%#04x)", uint16(o))
}
