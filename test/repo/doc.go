// Package repo checks rules that hold for the whole repository: the layering
// of DESIGN.md (who may import whom, enforced with `go list -deps`) and a
// package doc comment in a doc.go for every package.
package repo
