package api

import "time"

// XDPStatus is the body of GET /v1/xdp.
type XDPStatus struct {
	Interface   string            `json:"interface"`
	Mode        string            `json:"mode"`
	Arch        string            `json:"arch"`
	JITedBytes  uint32            `json:"jited_bytes"` // machine code of the program; 0: interpreted
	DefaultDeny bool              `json:"acl_default_deny"`
	Classes     []XDPClass        `json:"classes"`
	Talkers     []XDPTalker       `json:"top_talkers"`
	Hot         *XDPHot           `json:"hot,omitempty"`
	Drops       map[string]uint64 `json:"drops"`
}

// XDPClass is one traffic class's counters.
type XDPClass struct {
	Class    string            `json:"class"`
	Packets  uint64            `json:"packets"`
	Bytes    uint64            `json:"bytes"`
	Passed   uint64            `json:"passed"`
	Answered uint64            `json:"answered"`
	Dropped  map[string]uint64 `json:"dropped"`
	HotMiss  uint64            `json:"hot_miss,omitempty"`
	HotTorn  uint64            `json:"hot_torn,omitempty"`
}

// Class looks a class up by name.
func (s XDPStatus) Class(name string) (XDPClass, bool) {
	for _, c := range s.Classes {
		if c.Class == name {
			return c, true
		}
	}
	return XDPClass{}, false
}

// XDPTalker is one source's traffic.
type XDPTalker struct {
	Addr    string `json:"addr"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// XDPHot is the hot-GET map's state.
type XDPHot struct {
	Held          int    `json:"held"`
	Served        int    `json:"served"`
	Invalidations uint64 `json:"invalidations"`
}

// XDPSample is one sampled packet: GET /v1/xdp/samples streams them, one
// JSON object a line.
type XDPSample struct {
	Time    time.Time `json:"time"`
	TimeNS  int64     `json:"t_ns"` // CLOCK_MONOTONIC
	Len     int       `json:"len"`
	Class   string    `json:"class"`
	Verdict string    `json:"verdict"`
	Data    []byte    `json:"data"`
}

// SampleQuery is what GET /v1/xdp/samples takes.
type SampleQuery struct {
	Every   uint    // one packet in this many (default 1)
	Snap    uint    // bytes of each packet (default 128)
	Max     uint    // stop after this many (0: no limit)
	Seconds float64 // how long (default 5)
	Classes string  // comma-separated classes, "all", or "" (all but mgmt)
}

// ACLRule is one allow-list rule.
type ACLRule struct {
	Prefix string `json:"prefix"`
	Allow  bool   `json:"allow"`
}

// ACL is the body of GET /v1/acl.
type ACL struct {
	DefaultDeny bool      `json:"default_deny"`
	Rules       []ACLRule `json:"rules"`
}
