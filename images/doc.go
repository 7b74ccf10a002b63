// Package images builds what boots the agent on arm64: a reproducible
// initramfs whose /init is hecd (plus the kernel modules it loads itself),
// and a bundle of kernel, initramfs, manifest.json and an ed25519 signature
// over the manifest (package bundle). The initramfs carries the signing
// key's public half in /etc/hec/trusted.pub: process 1 trusts it for the
// agent bundles (BuildAgent: the hecd binary alone) it runs from the A/B
// slots on the state disk.
//
// The kernel comes from Debian: the linux-image-arm64 metapackage is
// resolved to the exact image package with apt, downloaded into an ignored
// cache and unpacked there (nothing downloaded is committed); the exact
// version goes into the manifest. Modules are picked by name and their
// dependencies resolved from each module's .modinfo (Debian's package has
// no modules.dep), and /etc/hec/modules lists them in load order.
//
// The initramfs is a newc cpio archive written here: entries sorted, times,
// owners and inode numbers zeroed or derived, so two builds of the same
// inputs are byte-identical (a test checks it).
package images
