// Package pid1 is hecd as process 1 of a VM or DPU image: a small
// supervisor that never runs service code. It mounts the pseudo file
// systems, loads the kernel modules shipped in the image, configures the
// network from the kernel command line, mounts the state disk, finds the
// region on the ivshmem device and reaps orphans; then it runs the agent
// as its child (the same binary, with flags for the image), restarts it
// with back-off when it dies — a Go fatal error, a SIGBUS from a full
// disk — or when its /healthz stays failing, and reboots the machine when
// it keeps dying. On SIGTERM, or when the agent asks (POST /v1/poweroff
// signals process 1), it stops the agent, syncs and powers off.
//
// A crash in a service therefore ends only the child: the kernel never
// sees process 1 die ("Attempted to kill init").
//
// The same supervisor is the loader of A/B slots (package slots) under
// `hecd supervise` (Supervise): before each start it reads the record,
// gives up a new slot that used its tries, verifies the chosen slot's
// bundle against the trusted key, counts the try, and runs that slot's
// hecd (the base slot: this binary); a new slot that answers /readyz is
// committed, one that is not ready within the gate is killed and rolled
// back. An agent that exits after it installed an update is a switch,
// not a crash. As process 1 it keeps the slots on the state disk and
// trusts, until a committed bundle rotates it, the key the image carries
// in /etc/hec/trusted.pub: an agent bundle replaces the agent, not the
// kernel or the initramfs.
//
// Kernel command line parameters it reads itself (all optional):
//
//	hec.ip=10.0.2.15/24   address of the first non-loopback interface
//	hec.gw=10.0.2.2       default gateway
//	hec.state=/dev/vda    the state disk (ext4), mounted at /var/lib/hec
//	hec.cluster_key=TEXT  the cluster key (written to a file for --cluster-key-file)
//
// Every other hec.NAME=VALUE is a flag of hecd (NAME with - for _) that
// the agent parses through its own flag set (hecd --kernel-cmdline), for
// example hec.durability=async, hec.xdp=off, hec.xdp_mode=generic,
// hec.lease_timeout=3s, hec.log_level=debug, hec.node_id=5,
// hec.peer=10.77.0.5:7700, hec.peers=1@10.77.0.1:7700,…,
// hec.membership=etcd://H:P, hec.test_hooks=true.
package pid1
