package dpu

import (
	"encoding/json"
	"net/http"
	"os"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/panics"
)

// mgmtHandler serves the core's routes on the mux the services added
// theirs to: /metrics, /healthz, /readyz, /v1/status, /v1/coll (the
// communicators' flight recorders), /v1/trace and /v1/clock (the ops'
// spans, trace.go), /v1/poweroff (and,
// with --test-hooks, /v1/debug/fatal and /v1/debug/store-panic).
func (a *Agent) mgmtHandler() http.Handler {
	reg := a.registry
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newCollector(a), a.disp.latency, a.disp.waits, a.disp.limited.suppressed, a.guard.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hec_worker_lone_wait_max_seconds",
			Help: "The longest a request waited for a worker while it was its queue pair's only work (fair sharing bounds it to one slice of another pair's work, plus the machine's stalls of the agent's cores)."},
			func() float64 { return a.disp.LoneWaitMax().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hec_worker_lone_wait_max_slices",
			Help: "The most slices of other requests' work (YieldEvery bytes each, or a request's end) that passed while a request waited for a worker as its queue pair's only work; fair sharing keeps it at 1 per other pair with work."},
			func() float64 { return float64(a.disp.LoneWaitSlices()) }))
	mux := a.mux
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := a.healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := a.isReady(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, a.Status())
	})
	mux.HandleFunc("GET /v1/coll", func(w http.ResponseWriter, r *http.Request) {
		comms := []api.CollComm{}
		for _, s := range a.services {
			if cs, ok := s.(*collService); ok {
				comms = cs.Comms()
			}
		}
		writeJSON(w, comms)
	})
	mux.HandleFunc("GET /v1/trace", a.serveTrace)
	mux.HandleFunc("GET /v1/clock", a.serveClock)
	mux.HandleFunc("POST /v1/poweroff", func(w http.ResponseWriter, r *http.Request) {
		if a.PowerOff == nil {
			http.Error(w, "poweroff is served only when hecd runs under process 1 of its machine", http.StatusNotImplemented)
			return
		}
		w.Write([]byte("powering off\n"))
		go a.PowerOff()
	})
	if a.cfg.Agent.TestHooks {
		mux.HandleFunc("POST /v1/debug/fatal", func(w http.ResponseWriter, r *http.Request) {
			a.log.Warn("test hook: dying of a Go fatal error")
			w.Write([]byte("dying\n"))
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			fatal()
		})
		mux.HandleFunc("POST /v1/debug/store-panic", func(w http.ResponseWriter, r *http.Request) {
			// The write hook runs on the store's committer: the next
			// write panics there, the store fails and the agent stops.
			a.log.Warn("test hook: the store's committer panics at the next write")
			a.shared.OnWrite(func([]byte) { panic("test hook: a panic in the store's committer") })
			w.Write([]byte("armed\n"))
		})
	}
	return a.guard.wrap(mux)
}

// fatal ends the process with a Go fatal error ("sync: unlock of unlocked
// mutex"), which no recover catches: what a crash in a service looks like
// to the supervisor.
func fatal() {
	os.Stderr.Sync()
	syscall.Sync()
	var mu sync.Mutex
	mu.Unlock()
}

// writeJSON writes v as indented JSON.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// collector exports the core's counters at scrape time, so the hot path
// touches only its atomics. Each service registers its own.
type collector struct {
	a *Agent

	ops, errs, qps, faults, fences, gen, services, retries, repairs, rebuilds, panics *prometheus.Desc
}

func newCollector(a *Agent) *collector {
	return &collector{
		a:        a,
		ops:      prometheus.NewDesc("hec_ops_total", "Ops served, by op.", []string{"op"}, nil),
		errs:     prometheus.NewDesc("hec_op_errors_total", "Ops that completed with a status other than ok, by op (op=rejected: failed validation or unknown op).", []string{"op"}, nil),
		qps:      prometheus.NewDesc("hec_queue_pairs", "Queue pairs by state.", []string{"state"}, nil),
		faults:   prometheus.NewDesc("hec_queue_pair_faults_total", "Times a queue pair was faulted (indices went wrong).", nil, nil),
		fences:   prometheus.NewDesc("hec_queue_pair_fences_total", "Times a queue pair was fenced (holder released, died or went silent).", nil, nil),
		gen:      prometheus.NewDesc("hec_agent_generation", "The generation the agent formatted the region with.", nil, nil),
		services: prometheus.NewDesc("hec_service_served", "1 when a configured service is served, 0 when it is not (disabled, failed, or stopped serving).", []string{"service"}, nil),
		retries:  prometheus.NewDesc("hec_accept_retries_total", "Accept errors retried with back-off (descriptors exhausted, aborted connections), by listener.", []string{"listener"}, nil),
		repairs:  prometheus.NewDesc("hec_region_repairs_total", "Words of the region found differing from the agent's view and written again, by what (header, state).", []string{"what"}, nil),
		rebuilds: prometheus.NewDesc("hec_region_rebuilds_total", "Times the region was lost (its file cut short, an access faulted) and formatted again.", nil, nil),
		panics:   prometheus.NewDesc("hec_panics_total", "Panics contained while serving one request (it failed with an internal error; the agent went on), by where (shared/panics).", []string{"where"}, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ops, c.errs, c.qps, c.faults, c.fences, c.gen, c.services, c.retries, c.repairs, c.rebuilds, c.panics} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, o := range c.a.disp.OpCounts() {
		if o.Op != "rejected" {
			ch <- prometheus.MustNewConstMetric(c.ops, prometheus.CounterValue, float64(o.Count), o.Op)
		}
		ch <- prometheus.MustNewConstMetric(c.errs, prometheus.CounterValue, float64(o.Errors), o.Op)
	}
	states := map[string]float64{"free": 0, "active": 0, "faulted": 0, "fenced": 0}
	for _, q := range c.a.disp.QueuePairs() {
		states[q.State]++
	}
	for s, n := range states {
		ch <- prometheus.MustNewConstMetric(c.qps, prometheus.GaugeValue, n, s)
	}
	faults, fences, header, stateWords, rebuilds := c.a.disp.RingCounters()
	ch <- prometheus.MustNewConstMetric(c.repairs, prometheus.CounterValue, float64(header), "header")
	ch <- prometheus.MustNewConstMetric(c.repairs, prometheus.CounterValue, float64(stateWords), "state")
	ch <- prometheus.MustNewConstMetric(c.rebuilds, prometheus.CounterValue, float64(rebuilds))
	ch <- prometheus.MustNewConstMetric(c.faults, prometheus.CounterValue, float64(faults))
	ch <- prometheus.MustNewConstMetric(c.fences, prometheus.CounterValue, float64(fences))
	ch <- prometheus.MustNewConstMetric(c.gen, prometheus.GaugeValue, float64(c.a.Generation()))
	for _, s := range c.a.serviceRows() {
		v := 0.0
		if s.Served && s.Stopped == "" {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.services, prometheus.GaugeValue, v, s.Name)
	}
	for where, n := range panics.Counts() {
		ch <- prometheus.MustNewConstMetric(c.panics, prometheus.CounterValue, float64(n), where)
	}
	envs := append([]*Env{c.a.coreEnv}, c.a.envs...)
	for _, e := range envs {
		if e == nil {
			continue
		}
		if n, ok := e.acceptRetries(); ok {
			ch <- prometheus.MustNewConstMetric(c.retries, prometheus.CounterValue, float64(n), e.name)
		}
	}
}
