package dpu

// Config is the agent's configuration: the core's section and one section
// per service, each with its defaults, checks and flags beside its
// service. A TOML file given with --config has an [agent] table and a
// table per service ([kv], [peer], [resp], [udp], [xdp], [ec], [update],
// [trace], [rdma]).
type Config struct {
	Agent  AgentConfig  `toml:"agent"`
	KV     KVConfig     `toml:"kv"`
	Peer   PeerConfig   `toml:"peer"`
	RESP   RESPConfig   `toml:"resp"`
	UDP    UDPConfig    `toml:"udp"`
	XDP    XDPConfig    `toml:"xdp"`
	EC     ECConfig     `toml:"ec"`
	Update UpdateConfig `toml:"update"`
	Trace  TraceConfig  `toml:"trace"`
	RDMA   RDMAConfig   `toml:"rdma"`
}

func (c *Config) sections() []section {
	return []section{&c.Agent, &c.KV, &c.Peer, &c.RESP, &c.UDP, &c.XDP, &c.EC, &c.Update, &c.Trace, &c.RDMA}
}

// services are the services hecd runs, in the order they start (and the
// reverse of the order they stop): RDMA first, whose Open makes the
// soft-RoCE links (--rdma-rxe) the peer layer listens on when its links
// run over RDMA, then the kv store, since others serve it.
func (c *Config) services() []Service {
	return []Service{newRDMAService(c.RDMA, c.Peer.Transport), newKVService(c.KV), newPeerService(c.Peer), newRESPService(c.RESP), newUDPService(c.UDP),
		newXDPService(c.XDP), newECService(c.EC, c.Agent.DPUProfile), newCollService(), newUpdateService(c.Update), newOTLPService(c.Trace)}
}
