package api

// Well-known ports of the agent's listeners: a hecd binds them on its
// address (loopback by default), clients derive an agent's addresses from
// its host and these.
const (
	PortMgmt = 7600  // management HTTP
	PortTCP  = 7610  // the handoff over TCP
	PortRESP = 6380  // the kv store over the Redis protocol
	PortUDP  = 11311 // the kv store's UDP GET path
	PortRDMA = 7620  // the handoff over RDMA (hecd --rdma-listen IP:PORT: an RDMA device's address)
	PortPeer = 7700  // the peer layer (agents talking to agents)
)

// Defaults of a local agent (hecd with no flags).
const (
	DefaultRegion = "/dev/shm/hec0"
	DefaultMgmt   = "127.0.0.1:7600"
	DefaultTCP    = "127.0.0.1:7610"
	DefaultRESP   = "127.0.0.1:6380"
	DefaultUDP    = "127.0.0.1:11311"
)

// Off is the value of an address or path flag that disables it.
const Off = "off"
