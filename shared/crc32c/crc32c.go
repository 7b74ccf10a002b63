package crc32c

import "hash/crc32"

// Table is the Castagnoli table (hardware-accelerated where the CPU has it).
var Table = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC-32C of b.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, Table) }

// Update continues crc over b.
func Update(crc uint32, b []byte) uint32 { return crc32.Update(crc, Table, b) }

// Combine returns the CRC-32C of A‖B given crc1 = CRC(A), crc2 = CRC(B)
// and len2 = len(B), by the zlib method (multiplying by x^(8·len2) in GF(2)
// with squared operator matrices): O(log len2), no data touched.
func Combine(crc1, crc2 uint32, len2 int64) uint32 {
	if len2 <= 0 {
		return crc1
	}
	var even, odd [32]uint32
	odd[0] = crc32.Castagnoli // reflected polynomial 0x82f63b78
	row := uint32(1)
	for n := 1; n < 32; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(&even, &odd) // operator for two zero bits
	gf2Square(&odd, &even) // four zero bits
	for {
		gf2Square(&even, &odd) // one zero byte, then doubling
		if len2&1 != 0 {
			crc1 = gf2Times(&even, crc1)
		}
		len2 >>= 1
		if len2 == 0 {
			break
		}
		gf2Square(&odd, &even)
		if len2&1 != 0 {
			crc1 = gf2Times(&odd, crc1)
		}
		len2 >>= 1
		if len2 == 0 {
			break
		}
	}
	return crc1 ^ crc2
}

func gf2Times(mat *[32]uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(square, mat *[32]uint32) {
	for n := range square {
		square[n] = gf2Times(mat, mat[n])
	}
}
