//go:build linux

package bpf

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
)

// FuzzProgram runs the program on arbitrary frames with a hot key held:
// it never aborts, a packet it passes or drops is left as it came, and a
// packet it answers is a well-formed reply (checkReply) carrying the held
// value.
func FuzzProgram(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("loading XDP programs needs root (CAP_BPF, CAP_NET_ADMIN)")
	}
	for _, fr := range []frame{
		{sport: 40000, dport: 11311, payload: getReq(7, "get hot\r\n")},
		{v6: true, sport: 40000, dport: 11311, payload: getReq(7, "get hot\r\n")},
		{vlans: []uint16{3, 4}, sport: 40000, dport: 11311, payload: getReq(7, "get hot\r\n")},
		{tcp: true, sport: 40000, dport: 6380, payload: []byte("*1\r\n$4\r\nPING\r\n")},
		{v6: true, ext: []layers.IPProtocol{layers.IPProtocolIPv6HopByHop, layers.IPProtocolIPv6Fragment}, sport: 1, dport: 11311, payload: []byte("x")},
	} {
		f.Add(fr.bytes(f))
	}
	p := load(f, Config{HotGET: true})
	admit(f, p, "hot", "fuzzed", 1, time.Time{})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if len(pkt) < 14 || len(pkt) > 1500 {
			return // BPF_PROG_TEST_RUN wants an Ethernet header; an MTU at most
		}
		act, out, err := p.Run(pkt)
		if err != nil {
			t.Fatal(err)
		}
		switch act {
		case XDPPass, XDPDrop:
			if !bytes.Equal(out, pkt) {
				t.Fatalf("action %d changed the packet", act)
			}
		case XDPTx:
			pl := checkReply(t, pkt, out)
			if !bytes.HasSuffix(pl, body("hot", "fuzzed")) {
				t.Fatalf("answer %q", pl)
			}
		default:
			t.Fatalf("action %d", act)
		}
	})
}
