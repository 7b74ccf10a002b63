//go:build race

package coll

// raceDetector: sync.Pool drops items at random under the race detector,
// so allocation counts mean nothing there.
const raceDetector = true
