//go:build race

package host_test

// raceDetector: sync.Pool drops items at random under the race detector,
// so allocation counts run higher there, and vary.
const raceDetector = true
