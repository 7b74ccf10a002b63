package crc32c

import "hash/crc32"

// Table is the Castagnoli table (hardware-accelerated where the CPU has it).
var Table = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC-32C of b.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, Table) }

// Update continues crc over b.
func Update(crc uint32, b []byte) uint32 { return crc32.Update(crc, Table, b) }

// Combine returns the CRC-32C of A‖B given crc1 = CRC(A), crc2 = CRC(B)
// and len2 = len(B): crc1 advanced past len2 zero bytes (multiplied by
// x^(8·len2) in GF(2)), one operator per set bit of len2 from a table made
// once, then crc2 added. No data is touched; a MiB's worth costs one
// 32×32 bit-matrix product.
func Combine(crc1, crc2 uint32, len2 int64) uint32 {
	for j := 0; len2 > 0; j, len2 = j+1, len2>>1 {
		if len2&1 != 0 {
			crc1 = gf2Times(&zeroBytes[j], crc1)
		}
	}
	return crc1 ^ crc2
}

// zeroBytes[j] advances a CRC register past 2^j zero bytes.
var zeroBytes = func() (t [63][32]uint32) {
	// The operator of one zero bit (the reflected polynomial, then the
	// register's shift), squared to two and four bits, then to each
	// power of two of bytes (the zlib method, its squarings made once).
	var odd, even [32]uint32
	odd[0] = crc32.Castagnoli // reflected polynomial 0x82f63b78
	row := uint32(1)
	for n := 1; n < 32; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(&even, &odd)
	gf2Square(&odd, &even)
	gf2Square(&t[0], &odd)
	for j := 1; j < len(t); j++ {
		gf2Square(&t[j], &t[j-1])
	}
	return t
}()

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
