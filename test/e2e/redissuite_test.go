package e2e

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hecsys/hec/test/testutil"
)

// TestRedisOwnSuite runs Redis 7.0.15's own tests of strings, the
// keyspace and the protocol against the agent (test/redis/suite, also
// `make redis-suite`): the agent must live through all of them and at
// least 280 must pass (Redis itself passes 314). It skips, saying why,
// where the suite cannot run (no tclsh, no network for its first fetch).
func TestRedisOwnSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: Redis's suite takes a minute")
	}
	testutil.NeedLong(t, "Redis's own suite, 80-150 s of tclsh and agent CPU; make test compares hecd's replies with redis-server's (kv/resp's TestSameRepliesAsRedis)")
	root := testutil.ModuleRoot()
	cmd := exec.Command(filepath.Join(root, "test/redis/suite"), testutil.Hecd(t))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() == 2:
		t.Skipf("Redis's suite cannot run here: %s", strings.TrimSpace(string(out)))
	case err != nil:
		t.Fatalf("test/redis/suite: %v\n%s", err, out)
	}
	t.Logf("%s", strings.SplitN(string(out), "\n", 2)[0])
}
