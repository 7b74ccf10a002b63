// Command mkimage builds the arm64 bundle (`make image`): it fetches the
// Debian arm64 kernel into the cache when missing, builds the initramfs
// with the given hecd as /init, and writes kernel, initramfs, manifest.json
// and its ed25519 signature into the output directory.
//
//	mkimage --agent bin/linux_arm64/hecd [--target qemu|bf2|bf3] [--out DIR] [--key FILE] [--cache DIR]
//
// With --agent-bundle it writes an agent bundle instead (`make bundle`):
// the given hecd (either architecture) alone, signed, what `hecctl flash`
// installs into an agent's inactive slot.
//
//	mkimage --agent-bundle --agent bin/hecd --version v1.2.3 [--out DIR] [--key FILE] [--next-key HEX]
package main
