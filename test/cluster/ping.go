package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/hecsys/hec/shared/peer"
	"github.com/hecsys/hec/shared/rail"
)

// PairResult is what one agent measured to another (POST
// /v1/peers/test on the first).
type PairResult struct {
	From int `json:"from"`
	To   int `json:"to"`
	peer.LinkTest
}

// Ping has every agent measure round trips (pings of them) and a bulk
// transfer (bytes) to every other, one pair at a time so pairs do not
// share the machine's cores. The results calibrate the network rails:
// written to rails.json in the state directory.
func (st *State) Ping(ctx context.Context, pings int, bytes int64) ([]PairResult, error) {
	var out []PairResult
	for _, a := range st.Nodes {
		hc := Client(a.NS)
		for _, b := range st.Nodes {
			if a.Index == b.Index {
				continue
			}
			url := fmt.Sprintf("http://%s/v1/peers/test?peer=%d&pings=%d&bytes=%d", a.Mgmt(), b.Index, pings, bytes)
			req, _ := newPost(ctx, url)
			r := PairResult{From: a.Index, To: b.Index}
			resp, err := hc.Do(req)
			if err != nil {
				r.Error = err.Error()
			} else {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err := json.Unmarshal(body, &r.LinkTest); err != nil {
					r.Error = fmt.Sprintf("%s: %s", resp.Status, body)
				}
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

func newPost(ctx context.Context, url string) (*http.Request, error) {
	return http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
}
