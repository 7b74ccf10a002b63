package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/bundle"
)

// ErrRollout wraps the end of a rolling update that did not bring every
// agent to the new version: a node that rolled back, refused the bundle
// or could not be reached. The nodes not yet updated stay on their
// version.
var ErrRollout = errors.New("host: rolling update stopped")

// Results of one node in a rolling update, besides api.UpdateCommitted
// and api.UpdateRolledBack.
const (
	RolloutVerified = "verified"  // a dry run: the node would take the bundle
	RolloutCurrent  = "current"   // the node serves the bundle's version already
	RolloutRefused  = "refused"   // the node said no to the bundle (its reason)
	RolloutFailed   = "failed"    // unreachable, not ready, or no outcome in time
	RolloutNotTried = "not tried" // left on its version: an earlier node failed
)

// RolloutTarget is one agent of a fleet: a name to report it by and its
// management API.
type RolloutTarget struct {
	Name string
	Mgmt *Mgmt
}

// RolloutOptions configure Rollout.
type RolloutOptions struct {
	// Bundles are agent bundle directories, at most one per architecture:
	// each agent gets the one built for its CPU.
	Bundles []string
	// MaxUnavailable is how many agents restart at once (default 1).
	MaxUnavailable int
	// DryRun verifies the bundle on every agent and installs nothing.
	DryRun bool
	// Timeout bounds each agent's update, upload to commit or rollback
	// (default 5 minutes).
	Timeout time.Duration
	// Event, when set, hears each step as it happens.
	Event func(node, what string)
}

// RolloutNode is what became of one agent.
type RolloutNode struct {
	Node   string `json:"node"`
	Arch   string `json:"arch,omitempty"`
	Before string `json:"before,omitempty"` // the version serving before
	After  string `json:"after,omitempty"`  // the version serving at the end
	Result string `json:"result"`
	Reason string `json:"reason,omitempty"`
}

type rolloutBundle struct{ dir, version string }

// Rollout updates a fleet of agents to a bundle, MaxUnavailable at a
// time, the way a rolling update of Kubernetes does: first every agent is
// asked for its version and ready state and to verify the bundle (a dry
// run), and nothing is installed unless all of them can take it; then the
// agents are updated in batches, each batch waited for until its loaders
// commit the new version, and the first batch with a rollback, a refusal
// or an agent that does not come back ends the rollout, leaving the
// agents after it on their version. It returns a row per target, in
// order, and an error wrapping ErrRollout when any did not end on the new
// version (or verified, on a dry run).
func Rollout(ctx context.Context, targets []RolloutTarget, o RolloutOptions) ([]RolloutNode, error) {
	if o.MaxUnavailable <= 0 {
		o.MaxUnavailable = 1
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	event := o.Event
	if event == nil {
		event = func(string, string) {}
	}
	bundles := map[string]rolloutBundle{}
	for _, dir := range o.Bundles {
		m, err := readManifest(dir)
		if err != nil {
			return nil, err
		}
		if m.Target != "" && m.Target != "agent" {
			return nil, fmt.Errorf("%s: a %s bundle, not an agent bundle", dir, m.Target)
		}
		if prev, ok := bundles[m.Arch]; ok {
			return nil, fmt.Errorf("%s and %s are both for %s: give one bundle per architecture", prev.dir, dir, m.Arch)
		}
		bundles[m.Arch] = rolloutBundle{dir: dir, version: m.Version}
	}
	if len(bundles) == 0 {
		return nil, errors.New("rollout: no bundle")
	}
	rows := make([]RolloutNode, len(targets))
	for i, t := range targets {
		rows[i].Node = t.Name
	}
	// stop ends the rollout: the rows not done are left as they are,
	// and the error names what failed and what was left.
	stop := func(before string) ([]RolloutNode, error) {
		var failed, left []string
		for i, r := range rows {
			switch r.Result {
			case "":
				rows[i].Result = RolloutNotTried
				left = append(left, r.Node)
			case RolloutFailed, RolloutRefused, api.UpdateRolledBack:
				failed = append(failed, r.Node+" "+r.Result)
			}
		}
		why := before + strings.Join(failed, ", ")
		if len(left) > 0 && before == "" {
			why += "; left on their version: " + strings.Join(left, ", ")
		}
		return rows, fmt.Errorf("%w: %s", ErrRollout, why)
	}

	// Before anything is installed: every agent up and ready, and willing
	// to take its bundle. A rollout that would fail on a node for a
	// reason known now stops before any node restarts.
	each(len(targets), func(i int) {
		t, r := targets[i], &rows[i]
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		st, err := t.Mgmt.Status(sctx)
		switch {
		case err != nil:
			r.Result, r.Reason = RolloutFailed, err.Error()
			return
		}
		r.Before, r.After = st.Version, st.Version // until it changes
		if !st.Ready {
			r.Result, r.Reason = RolloutFailed, "not ready"
			return
		}
		if st.Platform != nil {
			r.Arch = st.Platform.CPU.Arch
		}
		b, ok := bundles[r.Arch]
		switch {
		case !ok:
			r.Result, r.Reason = RolloutRefused, fmt.Sprintf("no bundle for %s", archName(r.Arch))
			return
		case st.Version == b.version:
			r.Result = RolloutCurrent
			event(t.Name, "serves "+st.Version+" already")
			return
		}
		if _, err := t.Mgmt.Update(sctx, b.dir, true, nil); err != nil {
			r.fail(err)
			return
		}
		event(t.Name, "verified "+b.version)
	})
	for _, r := range rows {
		if r.Result == RolloutFailed || r.Result == RolloutRefused {
			return stop("nothing installed: ")
		}
	}
	if o.DryRun {
		for i := range rows {
			if rows[i].Result == "" {
				rows[i].Result = RolloutVerified
			}
		}
		return rows, nil
	}

	var todo []int
	for i, r := range rows {
		if r.Result == "" {
			todo = append(todo, i)
		}
	}
	for len(todo) > 0 {
		batch := todo[:min(o.MaxUnavailable, len(todo))]
		todo = todo[len(batch):]
		each(len(batch), func(j int) {
			i := batch[j]
			t, r := targets[i], &rows[i]
			b := bundles[r.Arch]
			uctx, cancel := context.WithTimeout(ctx, o.Timeout)
			defer cancel()
			event(t.Name, "installing "+b.version)
			reply, err := t.Mgmt.Update(uctx, b.dir, false, nil)
			if err != nil {
				r.fail(err)
				return
			}
			out, st, err := t.Mgmt.WaitUpdate(uctx, reply.Version)
			r.After = st.Version
			if err != nil {
				r.Result, r.Reason = RolloutFailed, err.Error()
				return
			}
			r.Result, r.Reason = out.Result, out.Reason
			event(t.Name, out.Result+" "+out.Version)
		})
		for _, i := range batch {
			if rows[i].Result != api.UpdateCommitted {
				return stop("")
			}
		}
	}
	return rows, nil
}

// fail records an upload's error: refused when the agent said no,
// failed when it could not be asked.
func (r *RolloutNode) fail(err error) {
	r.Result, r.Reason = RolloutFailed, err.Error()
	if errors.Is(err, ErrRefused) {
		r.Result = RolloutRefused
	}
}

func archName(arch string) string {
	if arch == "" {
		return "its architecture (it does not report one)"
	}
	return arch
}

// readManifest reads a bundle directory's manifest (unverified: the
// agents verify it).
func readManifest(dir string) (bundle.Manifest, error) {
	var m bundle.Manifest
	b, err := os.ReadFile(filepath.Join(dir, bundle.ManifestFile))
	if err != nil {
		return m, fmt.Errorf("%s: not a bundle directory: %w", dir, err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", filepath.Join(dir, bundle.ManifestFile), err)
	}
	if m.Version == "" || m.Arch == "" {
		return m, fmt.Errorf("%s: the manifest names no version or architecture", dir)
	}
	return m, nil
}

// each runs f(0..n-1) at once and returns when all have.
func each(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}
