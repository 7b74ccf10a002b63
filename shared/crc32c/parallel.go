package crc32c

import "sync"

// UpdateParallel is Update of crc with b, computed in ways pieces on as
// many goroutines and combined exactly: one CRC stream runs on one core.
func UpdateParallel(crc uint32, b []byte, ways int) uint32 {
	if ways <= 1 {
		return Update(crc, b)
	}
	part := (len(b) + ways - 1) / ways
	parts := make([]uint32, ways)
	var wg sync.WaitGroup
	for i := 1; i < ways; i++ {
		lo, hi := min(i*part, len(b)), min((i+1)*part, len(b))
		wg.Add(1)
		go func() { defer wg.Done(); parts[i] = Checksum(b[lo:hi]) }()
	}
	parts[0] = Update(crc, b[:min(part, len(b))])
	wg.Wait()
	crc = parts[0]
	for i := 1; i < ways; i++ {
		lo, hi := min(i*part, len(b)), min((i+1)*part, len(b))
		crc = Combine(crc, parts[i], int64(hi-lo))
	}
	return crc
}
