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
	// OpECBase .. OpECBase+0xff are reserved for the ec service.
	OpECBase Op = 0x0200
	// OpCollBase .. OpCollBase+0xff are reserved for the coll service.
	OpCollBase Op = 0x0300
)

var opNames = map[Op]string{
	OpInvalid:  "invalid",
	OpPing:     "ping",
	OpChecksum: "checksum",
}

// RegisterOpName gives an op a name for String and for metrics labels. It is
// meant for package init of the services; it panics on a duplicate.
func RegisterOpName(op Op, name string) {
	if old, ok := opNames[op]; ok {
		panic(fmt.Sprintf("wire: op %#04x registered twice (%s, %s)", uint16(op), old, name))
	}
	opNames[op] = name
}

func (o Op) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return fmt.Sprintf("op(%#04x)", uint16(o))
}
