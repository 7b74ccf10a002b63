// Package test holds the end-to-end tests and the benchmarks that measure HEC
// against its peers. Its sub-packages are test/repo (checks on the repository
// itself: layering, documentation) and test/bench (the program behind
// `make bench`).
package test
