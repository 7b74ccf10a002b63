package kv

import "errors"

// Kind is what a key holds. Every front end but the Redis protocol's
// serves strings (KindString) only; the others are the typed values that
// kv/resp keeps (lists, sets, hashes, sorted sets), each in an encoding of
// its own that the store does not read. The store keeps a key's kind with
// its value (Badger's user metadata, and in its log) and refuses to hand a
// typed value to a caller that asked for a string: Get, Modify, IncrBy,
// CompareAndSwap and a Put that returns the prior value fail with
// ErrWrongType, and a plain Put replaces the key whatever it held, as
// Redis's SET does.
type Kind byte

const (
	KindString Kind = iota
	KindList
	KindSet
	KindHash
	KindZSet

	maxKind = KindZSet
)

// String is the kind's name as Redis's TYPE says it.
func (k Kind) String() string {
	switch k {
	case KindString:
		return "string"
	case KindList:
		return "list"
	case KindSet:
		return "set"
	case KindHash:
		return "hash"
	case KindZSet:
		return "zset"
	}
	return "unknown"
}

// ParseKind is the kind named as TYPE names it.
func ParseKind(s string) (Kind, bool) {
	for k := KindString; k <= maxKind; k++ {
		if k.String() == s {
			return k, true
		}
	}
	return 0, false
}

// ErrWrongType is a string operation on a typed value, or the reverse.
var ErrWrongType = errors.New("kv: operation against a key holding the wrong kind of value")
