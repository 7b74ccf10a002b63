package pid1

import "github.com/hecsys/hec/shared/bundle"

// Kernel command line parameters process 1 reads itself.
const (
	IPParam         = "hec.ip"
	GatewayParam    = "hec.gw"
	StateParam      = "hec.state"
	ClusterKeyParam = "hec.cluster_key"
)

// Params are all the hec.* parameters process 1 reads itself (the boot
// ROM's and the loader's included); the agent takes every other hec.NAME
// as its flag -NAME and leaves these alone.
var Params = []string{
	IPParam, GatewayParam, StateParam, ClusterKeyParam,
	bundle.BootSlotParam, bundle.BootGaveUpParam,
	bundle.LoaderTriesParam, bundle.LoaderGateParam,
}
