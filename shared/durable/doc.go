// Package durable writes files that survive a power cut whole or not at
// all: the bytes go to a temporary file beside the target, which is
// synced, renamed over it, and the directory synced. The agent keeps its
// token and generation this way; ec, the manifest of a shard directory.
package durable
