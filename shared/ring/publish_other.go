//go:build !amd64 || race

package ring

import "sync/atomic"

// publish stores v in w, the index that hands the descriptors written
// before it to the other side (see the amd64 version).
func publish(w *atomic.Uint64, v uint64) { w.Store(v) }
