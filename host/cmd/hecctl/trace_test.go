package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/trace"
)

// fakeAgent answers the management routes agentClocks asks: its clock
// (ahead of this process's by ahead, answered after delay), its node id,
// a link test, and its peers' clocks as its peer layer measured them.
func fakeAgent(t *testing.T, node uint32, ahead, delay time.Duration, peers []api.PeerStatus) agentTarget {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/clock", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		json.NewEncoder(w).Encode(trace.Reply{Now: time.Now().Add(ahead).UnixNano()})
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.Status{NodeID: node})
	})
	mux.HandleFunc("POST /v1/peers/test", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.LinkTest{Pings: 5})
	})
	mux.HandleFunc("GET /v1/peers", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(peers)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return agentTarget{name: "node " + string(rune('0'+node)), mgmt: host.NewMgmt(strings.TrimPrefix(srv.URL, "http://"))}
}

// TestAgentClocksThroughPeerLinks: agent 2 is far from hecctl (its clock
// answered 30 ms late) and agent 1 near; agent 1's peer layer measured
// agent 2's clock 2 s ahead of its own within 10 µs: agent 2 is aligned
// through agent 1 (1 s + 2 s), agent 1 by its own round trips. With no
// peer measure, each is aligned by its own.
func TestAgentClocksThroughPeerLinks(t *testing.T) {
	ctx := context.Background()
	peers := []api.PeerStatus{{ID: 2, ClockOffsetNs: int64(2 * time.Second), ClockRTTNs: int64(10 * time.Microsecond)}}
	near := fakeAgent(t, 1, time.Second, 0, peers)
	far := fakeAgent(t, 2, 3*time.Second, 30*time.Millisecond, nil)
	clocks := agentClocks(ctx, []agentTarget{near, far})
	if c := clocks[0]; c.err != nil || c.via != "" || c.offset < time.Second-c.rtt/2-time.Millisecond || c.offset > time.Second+c.rtt/2+time.Millisecond {
		t.Errorf("the near agent's clock: %+v, want 1 s ahead by its own round trips", c)
	}
	c := clocks[1]
	if c.err != nil || c.via != near.name || c.rtt >= 30*time.Millisecond || c.offset != clocks[0].offset+2*time.Second {
		t.Errorf("the far agent's clock: %+v, want it through %s's peer link: %v + 2 s within less than its own 30 ms", c, near.name, clocks[0].offset)
	}

	near = fakeAgent(t, 1, time.Second, 0, nil)
	clocks = agentClocks(ctx, []agentTarget{near, far})
	if c := clocks[1]; c.err != nil || c.via != "" || c.rtt < 30*time.Millisecond ||
		c.offset < 3*time.Second-c.rtt/2-time.Millisecond || c.offset > 3*time.Second+c.rtt/2+time.Millisecond {
		t.Errorf("the far agent's clock with no peer measure: %+v, want 3 s by its own round trips", c)
	}
}
