//go:build !amd64 && !arm64

package ec

func (o options) path() SIMD { return Generic }
