//go:build !hecnotrace

package trace

// Compiled says whether recording is built in: the hecnotrace build tag
// leaves it out (every On is false and the code behind it goes), to
// measure what it costs while off (make bench's trace scenario).
const Compiled = true
