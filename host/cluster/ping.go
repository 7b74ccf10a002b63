package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/rail"
)

// PairResult is what one agent measured to another (POST
// /v1/peers/test on the first).
type PairResult struct {
	From int `json:"from"`
	To   int `json:"to"`
	api.LinkTest
}

// Ping has every agent measure round trips (pings of them) and a bulk
// transfer (bytes) to every other, one pair at a time so pairs do not
// share the machine's cores. The results calibrate the network rails:
// written to rails.json in the state directory.
func (st *State) Ping(ctx context.Context, pings int, bytes int64) ([]PairResult, error) {
	var out []PairResult
	for _, a := range st.Nodes {
		m := a.Client()
		for _, b := range st.Nodes {
			if a.Index == b.Index {
				continue
			}
			r := PairResult{From: a.Index, To: b.Index}
			lt, err := m.TestPeer(ctx, uint32(b.Index), pings, bytes)
			r.LinkTest = lt
			if err != nil {
				r.Error = err.Error()
			}
			out = append(out, r)
		}
	}
	var rails []rail.Rail
	for _, r := range out {
		if r.Error == "" && r.GBPerSec > 0 {
			rails = append(rails, rail.Rail{Name: fmt.Sprintf("net %d→%d", r.From, r.To), Kind: rail.NetworkPath,
				Alpha: time.Duration(r.RTTP50Us * 1e3 / 2), Rate: r.GBPerSec * 1e9, Confidence: 0.5})
		}
	}
	if b, err := json.MarshalIndent(rails, "", "  "); err == nil {
		os.WriteFile(filepath.Join(st.Dir, "rails.json"), b, 0o644)
	}
	return out, nil
}
