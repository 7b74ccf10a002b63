//go:build !race

package coll

const raceDetector = false
