//go:build race

package ring

// raceBuild: built with the race detector, which takes a read of a slot
// the other side may be writing (Take's and Poll's early fetch of the
// next slot, a read that is never used) for a race: in one process, as
// the tests run both sides, it would be reported.
const raceBuild = true
