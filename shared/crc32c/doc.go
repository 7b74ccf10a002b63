// Package crc32c is CRC-32C (Castagnoli), the checksum of the CHECKSUM op,
// with Combine: the CRC of a concatenation from the CRCs of its parts, so
// pieces checksummed on different cores or rails combine exactly.
package crc32c
