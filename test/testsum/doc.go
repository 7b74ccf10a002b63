// Command testsum reads `go test -json` on stdin and prints what a plain
// `go test` run prints — each package's ok or FAIL line, and the output of
// every test that failed (and of a package that failed outside its tests)
// — then the slowest tests of the run, so that whoever waits on the suite
// sees where the time goes. It exits 1 when anything failed (a test, a
// package, a build), 0 otherwise.
//
//	go test -json ./... | go run ./test/testsum -slowest 10
package main
