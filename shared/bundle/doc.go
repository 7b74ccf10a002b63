// Package bundle is the signed unit the agent is built, shipped and
// flashed as: a directory of parts (the hecd binary for an agent bundle;
// the kernel Image and the initramfs for a VM or DPU image), a
// manifest.json naming each part's sha256 and size, and manifest.sig, an
// ed25519 signature over the manifest's exact bytes.
//
// Verify checks the signature against a trusted public key before it
// reads the manifest, then every part's hash; nothing of a bundle is
// trusted before both pass. Versions are semantic versions (vMAJOR.MINOR.
// PATCH) so that an agent can refuse one older than what it has
// committed (anti-rollback): Compare orders them.
//
// Pack and Unpack carry a bundle as a flat tar stream (what `hecctl
// flash` uploads): Unpack takes plain files only, bounded in number and
// bytes, each synced; it trusts nothing, Verify does that afterwards.
package bundle
