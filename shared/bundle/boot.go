package bundle

// A machine bundle is a whole machine: a kernel and an initramfs whose
// init is the agent (and its loader). A boot ROM boots it; a loader never
// runs it as a process. Its parts are MachineParts.
const (
	TargetAgent = "agent" // an agent bundle: the hecd binary a loader runs
	TargetQEMU  = "qemu"  // a machine bundle for the QEMU VM, booted by the harness
)

// MachineParts are the parts of a machine bundle for QEMU.
var MachineParts = []string{"Image", "initramfs.cpio"}

// IsMachine reports whether bundles of target are machine bundles that a
// boot ROM can boot (bf2 and bf3 images go through bfb-install, not this
// path).
func IsMachine(target string) bool { return target == TargetQEMU }

// DefaultTries is how often a new slot is started (or, a machine slot,
// booted) before the loader (or the boot ROM) falls back to the committed
// one.
const DefaultTries = 2

// Boot parameters of the kernel command line, from the boot ROM to
// process 1: the slot whose kernel and initramfs it booted ("" or "base":
// the image's own), and the slot on trial it gave up (it did not come up
// within its tries, or it does not verify).
const (
	BootSlotParam   = "hec.boot_slot"
	BootGaveUpParam = "hec.boot_gaveup" // SLOT:WHY[,SLOT:WHY]
)

// Loader parameters of the kernel command line, read by process 1 (its
// starts of a new slot before falling back, and how long a new slot has
// to become ready) and, the tries, by the boot ROM, which counts a machine
// slot's boots against them.
const (
	LoaderTriesParam = "hec.loader_tries"
	LoaderGateParam  = "hec.loader_gate"
)

// Why a boot ROM gives a slot up (the WHY of BootGaveUpParam).
const (
	GaveUpBoots  = "boots"  // booted its tries without its agent committing
	GaveUpVerify = "verify" // its bundle on the disk does not verify
)

// BootRecord is what a boot ROM reads of the slots' record (the JSON of
// the loader's record in STATE/slots/record.json).
type BootRecord struct {
	Active    string            `json:"active"`
	Committed string            `json:"committed"`
	Machine   string            `json:"machine,omitempty"`
	Targets   map[string]string `json:"targets,omitempty"`
	Versions  map[string]string `json:"versions,omitempty"`
}

// BootSlot is the slot whose kernel and initramfs the machine boots when
// the record's active slot is active: that slot when it holds a machine
// bundle, else the committed machine slot ("" for the image's own).
func BootSlot(active, machine string, targets map[string]string) string {
	if IsMachine(targets[active]) {
		return active
	}
	return machine
}
