package dpu

import (
	"encoding/json"
	"github.com/hecsys/hec/shared/peer"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Status is the body of GET /v1/status.
type Status struct {
	Version    string     `json:"version"`
	PID        int        `json:"pid"`
	Started    time.Time  `json:"started"`
	UptimeSec  float64    `json:"uptime_seconds"`
	Generation uint32     `json:"generation"`
	Region     string     `json:"region,omitempty"`
	RegionSize uint64     `json:"region_size,omitempty"`
	WindowSize uint64     `json:"window_size,omitempty"`
	StateDir   string     `json:"state_dir"`
	Services   []Service  `json:"services"`
	QueuePairs []QPStatus `json:"queue_pairs"`
	Ops        []OpCount  `json:"ops"`
	// Platform is what the agent runs on; Profile the DPU profile applied
	// (nil: none); Rails the agent's own rates, calibrated in the
	// background after it is ready (empty until the first calibration).
	Platform *Platform  `json:"platform,omitempty"`
	Profile  *Applied   `json:"dpu_profile,omitempty"`
	Rails    []RailRate `json:"rails"`
	// NodeID and Peers: the peer layer, when served.
	NodeID uint32            `json:"node_id,omitempty"`
	Peers  []peer.PeerStatus `json:"peers,omitempty"`
}

// Service is one configured listener or transport and whether it is served.
type Service struct {
	Name   string `json:"name"`
	Addr   string `json:"addr"`
	Served bool   `json:"served"`
	Note   string `json:"note,omitempty"`
}

func (a *Agent) mgmtHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newCollector(a), a.disp.latency)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	a.servePeers(mux)
	a.serveXDP(mux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := a.healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !a.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, a.Status())
	})
	mux.HandleFunc("POST /v1/poweroff", func(w http.ResponseWriter, r *http.Request) {
		if a.powerOff == nil {
			http.Error(w, "poweroff is served only when hecd is process 1", http.StatusNotImplemented)
			return
		}
		w.Write([]byte("powering off\n"))
		go a.powerOff()
	})
	return mux
}

// writeJSON writes v as indented JSON.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
