// Package wire defines the bytes that cross the host ⇄ DPU boundary: the
// 64-byte descriptor that travels through the shared-memory rings, the op and
// status codes, scatter-gather lists, and the framing of the same requests and
// responses over a byte stream (the TCP fallback transport).
//
// # Descriptor
//
// A descriptor is exactly one cache line, little-endian:
//
//	off size field
//	  0    2 Op      operation code (OpPing, OpChecksum, ...)
//	  2    2 Flags   FlagSGL, ...
//	  4    2 Status  set by the completion; zero in a request
//	  6    1 NSpan   number of valid entries in Spans (0..MaxSpans)
//	  7    1 -       reserved, must be zero
//	  8    8 Tag     chosen by the submitter, echoed by the completion
//	 16    8 Arg0    op-specific argument or result
//	 24    8 Arg1    op-specific argument or result
//	 32   32 Spans   MaxSpans × {Off uint32, Len uint32}
//
// Span offsets are relative to the queue pair's window of the arena (in the
// shared-memory transport) or to the frame's inline payload (in the stream
// transport). A window is therefore at most 4 GiB; larger buffers are chunked
// by the host library. With FlagSGL set, Spans[0] does not name data: it names
// a scatter-gather list in the window, an array of 8-byte spans, decoded and
// validated by DecodeSGL.
//
// # Work per descriptor
//
// A request names at most MaxTouch(window) = MaxSpans × window bytes of
// data, inline or through a list (whose spans may overlap, but not add up to
// more). That bounds what one 64-byte descriptor can make the agent compute:
// a flood of them is a flood of bounded slices, which the agent's workers
// share fairly between queue pairs.
//
// # Trust
//
// Every decoder here treats its input as hostile: it never panics, never
// allocates more than the caller's limits allow, and checks every span with
// overflow-safe arithmetic (Span.Within). The fuzz tests hold it to that.
package wire
