package api

// PeerStatus is one member of the agent's cluster (GET /v1/peers, and
// /v1/status's peers).
type PeerStatus struct {
	ID          uint32  `json:"id"`
	Addr        string  `json:"addr"`
	Connected   bool    `json:"connected"`
	Alive       bool    `json:"alive"`
	Dead        string  `json:"dead,omitempty"`
	HeardAgoSec float64 `json:"heard_ago_seconds"`
	Pending     int64   `json:"pending"`
	SentBytes   uint64  `json:"sent_bytes"`
	RecvBytes   uint64  `json:"recv_bytes"`
	SentFrames  uint64  `json:"sent_frames"`
	RecvFrames  uint64  `json:"recv_frames"`
	RTTMicros   float64 `json:"rtt_us"`
	// ClockOffsetNs is how far the peer's clock is ahead of this agent's,
	// as the shortest of the latest pings to it measured; the error is
	// within half of ClockRTTNs, that ping's round trip (0: no ping yet).
	ClockOffsetNs int64 `json:"clock_offset_ns,omitempty"`
	ClockRTTNs    int64 `json:"clock_rtt_ns,omitempty"`
}

// LinkTest is what an agent measured to one peer: round trips and a bulk
// transfer (POST /v1/peers/test?peer=ID&pings=N&bytes=B).
type LinkTest struct {
	Peer     uint32  `json:"peer"`
	Pings    int     `json:"pings"`
	RTTMinUs float64 `json:"rtt_min_us"`
	RTTP50Us float64 `json:"rtt_p50_us"`
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"`
	GBPerSec float64 `json:"gb_per_s"`
	Error    string  `json:"error,omitempty"`
}
