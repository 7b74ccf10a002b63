// Package qemu boots an image bundle (see images) on qemu-system-aarch64
// -M virt under TCG, so the x86 host library talks to the arm64 agent as it
// would to a DPU: the region is an ivshmem device backed by a host
// /dev/shm file, the network a virtio-net NIC with the agent's ports
// forwarded to loopback, the state a virtio-blk disk image.
//
// A VM's files live in its state directory (StateRoot()/NAME by default:
// $XDG_STATE_HOME/hec/qemu/NAME, or ~/.local/state/hec/qemu/NAME): disk.img (created and formatted ext4 on first use, kept across boots),
// console.log, and vm.json (how to reach it, for `hecctl qemu status|down`).
// Up waits for the agent's /readyz and cleans up on every failure; Down asks
// the agent to power off and kills QEMU if it does not; PowerCut kills QEMU
// at once (for durability tests).
package qemu
