package dpu

import (
	"context"
	"flag"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hecsys/hec/kv/resp"
	"github.com/hecsys/hec/shared/accept"
	"github.com/hecsys/hec/shared/api"
)

// RESPConfig is the Redis-protocol front end's section ([resp]).
type RESPConfig struct {
	// Addr is where RESP clients connect. Default 127.0.0.1:6380; "off"
	// disables it.
	Addr string `toml:"addr"`
	// Password, when set, makes clients AUTH first (AUTH PASS, or AUTH
	// default PASS). Default: the operator's token (--token-file) when
	// one is configured, else none — refused beyond loopback without
	// --insecure.
	Password string `toml:"password"`
}

func (c *RESPConfig) withDefaults() error { defString(&c.Addr, api.DefaultRESP); return nil }
func (c *RESPConfig) validate() error     { return checkAddr("resp", c.Addr) }

func (c *RESPConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "resp", c.Addr, "Redis-protocol (kv) address, or off")
	fs.StringVar(&c.Password, "resp-password", c.Password, "password RESP clients must AUTH with (default none)")
}

// respService serves the kv store over the Redis protocol.
type respService struct {
	cfg  RESPConfig
	ln   net.Listener
	srv  *resp.Server
	loop *accept.Loop
}

func newRESPService(cfg RESPConfig) *respService { return &respService{cfg: cfg} }

func (s *respService) Name() string { return "resp" }

func (s *respService) Open(_ context.Context, env *Env) error {
	if s.cfg.Addr == Off {
		return nil
	}
	if s.cfg.Password == "" {
		s.cfg.Password = env.Shared.Token // the default user's password: the operator's token
	}
	if err := env.Shared.checkExposed(env.Log, "--resp", s.cfg.Addr, s.cfg.Password != ""); err != nil {
		return err
	}
	ln, err := env.Listen("resp", s.cfg.Addr)
	if err != nil {
		return err
	}
	s.ln = ln
	env.Shared.SetAddr("resp", ln.Addr().String())
	s.srv = &resp.Server{Store: env.Shared.Store, Password: s.cfg.Password, Log: env.Log, Version: env.Version}
	env.Metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hec_resp_clients", Help: "Connected RESP clients."},
		func() float64 { return float64(s.srv.Clients()) }))
	return nil
}

func (s *respService) Start(ctx context.Context, env *Env) error {
	if s.ln == nil {
		return nil
	}
	if err := s.srv.Start(ctx); err != nil {
		return err
	}
	s.loop = env.Serve(s.ln, s.srv.ServeConn)
	return nil
}

func (s *respService) Stop() {
	if s.loop != nil {
		s.loop.Close()
	} else if s.ln != nil {
		s.ln.Close()
	}
	if s.srv != nil {
		s.srv.Close()
	}
}

func (s *respService) Status() api.Service {
	if s.ln == nil {
		return api.Service{Name: "resp", Addr: s.cfg.Addr, Note: "off (hecd --resp ADDR)"}
	}
	note := "kv over the Redis protocol"
	if s.cfg.Password != "" {
		note += ", AUTH required"
	}
	return api.Service{Name: "resp", Addr: s.ln.Addr().String(), Served: true, Note: note}
}
