package verbstest

import (
	"net/netip"
	"os"
	"testing"

	"github.com/hecsys/hec/shared/verbs"
)

// Addr is this machine's RDMA device's IPv4 address (its RoCE v2 GID), or
// a skip saying why there is none; HEC_REQUIRE_RDMA=1 (the VM tests, where
// soft-RoCE runs) makes its absence a failure.
func Addr(t testing.TB) netip.Addr {
	t.Helper()
	ip, err := verbs.DeviceIPv4()
	if err == nil {
		return ip
	}
	if os.Getenv("HEC_REQUIRE_RDMA") == "1" {
		t.Fatalf("HEC_REQUIRE_RDMA=1: %v", err)
	}
	t.Skipf("no RDMA here: %v (test/vm runs this in a guest with soft-RoCE)", err)
	return netip.Addr{}
}
