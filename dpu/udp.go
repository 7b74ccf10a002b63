package dpu

import (
	"context"
	"flag"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hecsys/hec/kv/udp"
	"github.com/hecsys/hec/shared/api"
)

// UDPConfig is the UDP GET path's section ([udp]).
type UDPConfig struct {
	// Addr is where memcached-style UDP GETs are answered. Default
	// 127.0.0.1:11311; "off" disables it.
	Addr string `toml:"addr"`
}

func (c *UDPConfig) withDefaults() error { defString(&c.Addr, api.DefaultUDP); return nil }
func (c *UDPConfig) validate() error     { return checkAddr("udp", c.Addr) }
func (c *UDPConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "udp", c.Addr, "UDP GET (kv) address, or off")
}

// udpService answers GETs over UDP in memcached's format; GETs that reach
// it are reported to Shared.GETSeen (the XDP fast path's hot keys).
type udpService struct {
	cfg UDPConfig
	pc  net.PacketConn
	srv *udp.Server
}

func newUDPService(cfg UDPConfig) *udpService { return &udpService{cfg: cfg} }

func (s *udpService) Name() string { return "udp" }

func (s *udpService) Open(_ context.Context, env *Env) error {
	if s.cfg.Addr == Off {
		return nil
	}
	pc, err := env.ListenPacket("udp", s.cfg.Addr)
	if err != nil {
		return err
	}
	s.pc = pc
	env.Shared.SetAddr("udp", pc.LocalAddr().String())
	s.srv = &udp.Server{Store: env.Shared.Store, Log: env.Log, Seen: env.Shared.GETSeen}
	env.Metrics.MustRegister(newUDPCollector(s.srv))
	return nil
}

func (s *udpService) Start(ctx context.Context, env *Env) error {
	if s.pc != nil {
		env.Go(func() { s.srv.Serve(ctx, s.pc) })
	}
	return nil
}

func (s *udpService) Stop() {
	if s.pc != nil {
		s.pc.Close()
	}
}

func (s *udpService) Status() api.Service {
	if s.pc == nil {
		return api.Service{Name: "udp", Addr: s.cfg.Addr, Note: "off (hecd --udp ADDR)"}
	}
	return api.Service{Name: "udp", Addr: s.pc.LocalAddr().String(), Served: true, Note: "memcached-style GET"}
}

type udpCollector struct {
	srv  *udp.Server
	reqs *prometheus.Desc
}

func newUDPCollector(srv *udp.Server) *udpCollector {
	return &udpCollector{srv: srv, reqs: prometheus.NewDesc("hec_udp_requests_total", "UDP GET datagrams, by outcome.", []string{"outcome"}, nil)}
}

func (c *udpCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.reqs }

func (c *udpCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.reqs, prometheus.CounterValue, float64(c.srv.Hits.Load()), "hit")
	ch <- prometheus.MustNewConstMetric(c.reqs, prometheus.CounterValue, float64(c.srv.Misses.Load()), "miss")
	ch <- prometheus.MustNewConstMetric(c.reqs, prometheus.CounterValue, float64(c.srv.Errors.Load()), "error")
}
