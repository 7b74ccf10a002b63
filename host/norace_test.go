//go:build !race

package host_test

const raceDetector = false
