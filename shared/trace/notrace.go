//go:build hecnotrace

package trace

// Compiled: false in a build with the hecnotrace tag, which records
// nothing.
const Compiled = false
