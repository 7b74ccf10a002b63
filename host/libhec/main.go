package main

func main() {} // a library: -buildmode=c-shared or c-archive (it needs cgo)
