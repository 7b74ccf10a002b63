// Package tcp carries the handoff over TCP: the same descriptors as the
// region's rings, each in a frame with its payload inline (wire's
// frames), the outputs coming back inline in the completion's frame. The
// fallback transport where no memory is shared, and the way to reach an
// agent over the host–DPU network without RDMA.
package tcp
