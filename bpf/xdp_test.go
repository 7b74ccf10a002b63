//go:build linux

package bpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

var testPorts = Ports{RESP: 6380, UDPGet: 11311, Peer: 7700, Mgmt: 7600}

func load(t testing.TB, cfg Config) *Program {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading XDP programs needs root (CAP_BPF, CAP_NET_ADMIN)")
	}
	if cfg.Ports == (Ports{}) {
		cfg.Ports = testPorts
	}
	p, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

var (
	macA = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	macB = net.HardwareAddr{2, 0, 0, 0, 0, 2}
	src4 = net.IP{10, 99, 0, 1}
	dst4 = net.IP{10, 99, 0, 2}
	src6 = net.ParseIP("fd00::1")
	dst6 = net.ParseIP("fd00::2")
)

// frame is a packet to build: the layers between Ethernet and the payload.
type frame struct {
	vlans   []uint16
	v6      bool
	ext     []layers.IPProtocol // IPv6 extension headers, in order
	tcp     bool
	sport   uint16
	dport   uint16
	payload []byte
	src     net.IP
}

func (f frame) bytes(t testing.TB) []byte {
	t.Helper()
	var ls []gopacket.SerializableLayer
	eth := &layers.Ethernet{SrcMAC: macA, DstMAC: macB, EthernetType: layers.EthernetTypeIPv4}
	if f.v6 {
		eth.EthernetType = layers.EthernetTypeIPv6
	}
	ls = append(ls, eth)
	if len(f.vlans) > 0 {
		next := eth.EthernetType
		eth.EthernetType = layers.EthernetTypeDot1Q
		if len(f.vlans) > 1 {
			eth.EthernetType = layers.EthernetTypeQinQ
		}
		for i, id := range f.vlans {
			typ := layers.EthernetTypeDot1Q
			if i == len(f.vlans)-1 {
				typ = next
			}
			ls = append(ls, &layers.Dot1Q{VLANIdentifier: id, Type: typ})
		}
	}
	l4 := layers.IPProtocolUDP
	if f.tcp {
		l4 = layers.IPProtocolTCP
	}
	var netl gopacket.NetworkLayer
	if f.v6 {
		src := src6
		if f.src != nil {
			src = f.src
		}
		ip := &layers.IPv6{Version: 6, HopLimit: 64, SrcIP: src, DstIP: dst6, NextHeader: l4}
		if len(f.ext) > 0 {
			ip.NextHeader = f.ext[0]
		}
		ls = append(ls, ip)
		netl = ip
		for i, e := range f.ext {
			next := l4
			if i+1 < len(f.ext) {
				next = f.ext[i+1]
			}
			ls = append(ls, gopacket.Payload(ext6(e, next)))
		}
	} else {
		src := src4
		if f.src != nil {
			src = f.src
		}
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, SrcIP: src, DstIP: dst4, Protocol: l4}
		ls = append(ls, ip)
		netl = ip
	}
	if f.tcp {
		tcp := &layers.TCP{SrcPort: layers.TCPPort(f.sport), DstPort: layers.TCPPort(f.dport), Window: 100, ACK: true, PSH: true}
		tcp.SetNetworkLayerForChecksum(netl)
		ls = append(ls, tcp)
	} else if len(f.ext) == 0 {
		udp := &layers.UDP{SrcPort: layers.UDPPort(f.sport), DstPort: layers.UDPPort(f.dport)}
		udp.SetNetworkLayerForChecksum(netl)
		ls = append(ls, udp)
	} else {
		// gopacket cannot checksum past our raw extension headers: a bare
		// UDP header with its length and no checksum.
		u := make([]byte, 8)
		binary.BigEndian.PutUint16(u[0:], f.sport)
		binary.BigEndian.PutUint16(u[2:], f.dport)
		binary.BigEndian.PutUint16(u[4:], uint16(8+len(f.payload)))
		ls = append(ls, gopacket.Payload(u))
	}
	ls = append(ls, gopacket.Payload(f.payload))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if f.v6 && len(f.ext) > 0 {
		// FixLengths counted only what gopacket knows as the IPv6 payload.
		l3 := 14 + 4*len(f.vlans)
		binary.BigEndian.PutUint16(b[l3+4:], uint16(len(b)-l3-40))
	}
	return b
}

// ext6 is an IPv6 extension header of 8 bytes.
func ext6(kind, next layers.IPProtocol) []byte {
	h := make([]byte, 8)
	h[0] = byte(next)
	if kind == layers.IPProtocolIPv6Fragment {
		return h // offset 0, no more fragments
	}
	h[2], h[3] = 1, 4 // a PadN option
	return h
}

func getReq(id uint16, line string) []byte {
	b := []byte{byte(id >> 8), byte(id), 0, 0, 0, 1, 0, 0}
	return append(b, line...)
}

func statsOf(t testing.TB, p *Program) []ClassStats {
	t.Helper()
	s, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestClassify(t *testing.T) {
	p := load(t, Config{})
	udp := func(dport uint16) frame { return frame{sport: 40000, dport: dport, payload: []byte("hello")} }
	tcp := func(dport uint16) frame { return frame{tcp: true, sport: 40000, dport: dport, payload: []byte("x")} }
	v6 := func(f frame) frame { f.v6 = true; return f }
	vlan := func(f frame, ids ...uint16) frame { f.vlans = ids; return f }
	ext := func(f frame, e ...layers.IPProtocol) frame { f.ext = e; f.v6 = true; return f }
	type tc struct {
		name   string
		pkt    []byte
		action uint32
		class  Class
		drop   int // -1: not dropped
	}
	cases := []tc{
		{"resp", tcp(6380).bytes(t), XDPPass, ClassRESP, -1},
		{"udp get", udp(11311).bytes(t), XDPPass, ClassUDPGet, -1},
		{"peer", tcp(7700).bytes(t), XDPPass, ClassPeer, -1},
		{"mgmt", tcp(7600).bytes(t), XDPPass, ClassMgmt, -1},
		{"reply to the agent's peer connection", frame{tcp: true, sport: 7700, dport: 50000}.bytes(t), XDPPass, ClassPeer, -1},
		{"other udp", udp(53).bytes(t), XDPPass, ClassOther, -1},
		{"resp over udp is resp", udp(6380).bytes(t), XDPPass, ClassRESP, -1},
		{"udp get port over tcp is other", tcp(11311).bytes(t), XDPPass, ClassOther, -1},
		{"vlan", vlan(tcp(6380), 10).bytes(t), XDPPass, ClassRESP, -1},
		{"qinq", vlan(udp(11311), 10, 20).bytes(t), XDPPass, ClassUDPGet, -1},
		{"ipv6", v6(tcp(7600)).bytes(t), XDPPass, ClassMgmt, -1},
		{"ipv6 hop-by-hop, dest opts", ext(udp(11311), layers.IPProtocolIPv6HopByHop, layers.IPProtocolIPv6Destination).bytes(t), XDPPass, ClassUDPGet, -1},
		{"ipv6 first fragment", ext(udp(6380), layers.IPProtocolIPv6Fragment).bytes(t), XDPPass, ClassRESP, -1},
		{"arp", arp(t), XDPPass, ClassOther, -1},
		{"unknown ethertype", append(tcp(6380).bytes(t)[:12], 0x88, 0xb5, 1, 2, 3), XDPPass, ClassOther, -1},
		{"ethernet header only", tcp(6380).bytes(t)[:14], XDPDrop, ClassOther, DropMalformed},
		{"vlan tag cut short", vlan(tcp(6380), 7).bytes(t)[:16], XDPPass, ClassOther, -1},
	}
	// Later fragments carry no ports: other.
	frag := udp(11311).bytes(t)
	binary.BigEndian.PutUint16(frag[14+6:], 0x0010) // offset 128 bytes
	fixIPv4Sum(frag[14:34])
	cases = append(cases, tc{"ipv4 later fragment", frag, XDPPass, ClassOther, -1})
	frag6 := ext(udp(11311), layers.IPProtocolIPv6Fragment).bytes(t)
	binary.BigEndian.PutUint16(frag6[14+40+2:], 0x0008) // offset 8 bytes
	cases = append(cases, tc{"ipv6 later fragment", frag6, XDPPass, ClassOther, -1})
	// Lying lengths and truncated headers are dropped as malformed.
	long := udp(11311).bytes(t)
	binary.BigEndian.PutUint16(long[14+2:], 1000)
	fixIPv4Sum(long[14:34])
	cases = append(cases, tc{"ipv4 total length past the frame", long, XDPDrop, ClassOther, DropMalformed})
	ulen := udp(11311).bytes(t)
	binary.BigEndian.PutUint16(ulen[34+4:], 200)
	cases = append(cases, tc{"udp length past the ip payload", ulen, XDPDrop, ClassOther, DropMalformed})
	short := udp(11311).bytes(t)
	binary.BigEndian.PutUint16(short[34+4:], 4)
	cases = append(cases, tc{"udp length under its header", short, XDPDrop, ClassOther, DropMalformed})
	cases = append(cases, tc{"ipv4 header cut short", tcp(6380).bytes(t)[:14+12], XDPDrop, ClassOther, DropMalformed})
	cases = append(cases, tc{"tcp header cut short", tcp(6380).bytes(t)[:14+20+10], XDPDrop, ClassOther, DropMalformed})
	ihl := tcp(6380).bytes(t)
	ihl[14] = 0x43
	cases = append(cases, tc{"ipv4 ihl under 5", ihl, XDPDrop, ClassOther, DropMalformed})
	p6 := v6(udp(11311)).bytes(t)
	binary.BigEndian.PutUint16(p6[14+4:], 500)
	cases = append(cases, tc{"ipv6 payload length past the frame", p6, XDPDrop, ClassOther, DropMalformed})
	hbh := ext(udp(11311), layers.IPProtocolIPv6HopByHop).bytes(t)
	hbh[14+40+1] = 200 // extension length past the payload
	cases = append(cases, tc{"ipv6 extension past the payload", hbh, XDPDrop, ClassOther, DropMalformed})

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := statsOf(t, p)
			act, _, err := p.Run(c.pkt)
			if err != nil {
				t.Fatal(err)
			}
			if act != c.action {
				t.Fatalf("action %d, want %d", act, c.action)
			}
			after := statsOf(t, p)
			for cl := Class(0); cl < NumClasses; cl++ {
				d := after[cl].Packets - before[cl].Packets
				if want := map[bool]uint64{true: 1}[cl == c.class]; d != want {
					t.Errorf("class %s counted %d packets, want %d", cl, d, want)
				}
			}
			s := after[c.class]
			b := before[c.class]
			if c.drop >= 0 {
				if s.Dropped[c.drop]-b.Dropped[c.drop] != 1 {
					t.Errorf("drop %s not counted", DropReasons[c.drop])
				}
			} else if s.Passed-b.Passed != 1 {
				t.Errorf("pass not counted")
			}
			if s.Bytes-b.Bytes != uint64(len(c.pkt)) {
				t.Errorf("bytes %d, want %d", s.Bytes-b.Bytes, len(c.pkt))
			}
		})
	}
}

func arp(t testing.TB) []byte {
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{},
		&layers.Ethernet{SrcMAC: macA, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPRequest, SourceHwAddress: macA, SourceProtAddress: src4, DstHwAddress: make([]byte, 6), DstProtAddress: dst4})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func fixIPv4Sum(h []byte) {
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], ^fold(sum16(0, h)))
}

func sum16(s uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

func TestACL(t *testing.T) {
	p := load(t, Config{})
	from := func(ip string, dport uint16) []byte {
		a := net.ParseIP(ip)
		return frame{sport: 40000, dport: dport, payload: []byte("x"), src: a, v6: a.To4() == nil}.bytes(t)
	}
	run := func(pkt []byte) uint32 {
		act, _, err := p.Run(pkt)
		if err != nil {
			t.Fatal(err)
		}
		return act
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(p.ACLAdd(ACLRule{Prefix: netip.MustParsePrefix("10.1.0.0/16")}))
	must(p.ACLAdd(ACLRule{Prefix: netip.MustParsePrefix("10.1.2.0/24"), Allow: true}))
	must(p.ACLAdd(ACLRule{Prefix: netip.MustParsePrefix("fd00:bad::/32")}))
	steps := []struct {
		deny bool
		src  string
		port uint16
		want uint32
	}{
		{false, "10.2.0.1", 6380, XDPPass},     // default allow
		{false, "10.1.9.9", 6380, XDPDrop},     // denied /16
		{false, "10.1.2.3", 6380, XDPPass},     // the longer allow wins
		{false, "10.1.9.9", 53, XDPPass},       // not a service port
		{false, "fd00:bad::1", 11311, XDPDrop}, // IPv6 deny
		{false, "fd00:900d::1", 11311, XDPPass},
		{true, "10.2.0.1", 6380, XDPDrop}, // default deny
		{true, "10.1.2.3", 7700, XDPPass},
		{true, "10.2.0.1", 53, XDPPass},
		{true, "fd00:900d::1", 7600, XDPDrop},
	}
	for _, s := range steps {
		must(p.SetDefaultDeny(s.deny))
		before := statsOf(t, p)
		if got := run(from(s.src, s.port)); got != s.want {
			t.Errorf("default deny %v, %s → %d: action %d, want %d", s.deny, s.src, s.port, got, s.want)
		}
		after := statsOf(t, p)
		var acl uint64
		for c := range after {
			acl += after[c].Dropped[DropACL] - before[c].Dropped[DropACL]
		}
		if (s.want == XDPDrop) != (acl == 1) {
			t.Errorf("%s: %d acl drops counted", s.src, acl)
		}
	}
	rules, err := p.ACLList()
	must(err)
	if len(rules) != 3 || rules[0].Prefix.String() != "10.1.0.0/16" || rules[0].Allow || !rules[1].Allow ||
		rules[2].Prefix.String() != "fd00:bad::/32" {
		t.Fatalf("list: %v", rules)
	}
	must(p.ACLDel(netip.MustParsePrefix("10.1.0.0/16")))
	if err := p.ACLDel(netip.MustParsePrefix("10.1.0.0/16")); !errors.Is(err, ErrNoRule) {
		t.Fatalf("deleting twice: %v", err)
	}
	must(p.SetDefaultDeny(false))
	if got := run(from("10.1.9.9", 6380)); got != XDPPass {
		t.Fatalf("after del: %d", got)
	}
}

// body is the reply after the frame header for key and value.
func body(key, value string) []byte {
	return []byte("VALUE " + key + " 0 " + strconv.Itoa(len(value)) + "\r\n" + value + "\r\nEND\r\n")
}

func admit(t testing.TB, p *Program, key, value string, version uint64, expires time.Time) {
	t.Helper()
	err := p.Hot().Admit([]byte(key), func() (HotValue, error) {
		return HotValue{Body: body(key, value), Version: version, Expires: expires}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkReply checks a reply frame: addresses and ports swapped from req,
// lengths and checksums right; it returns the memcached payload.
func checkReply(t *testing.T, req, rep []byte) []byte {
	t.Helper()
	pk := gopacket.NewPacket(rep, layers.LayerTypeEthernet, gopacket.Default)
	if el := pk.ErrorLayer(); el != nil {
		t.Fatalf("reply does not parse: %v", el.Error())
	}
	rq := gopacket.NewPacket(req, layers.LayerTypeEthernet, gopacket.Default)
	e, qe := pk.Layer(layers.LayerTypeEthernet).(*layers.Ethernet), rq.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if !bytes.Equal(e.SrcMAC, qe.DstMAC) || !bytes.Equal(e.DstMAC, qe.SrcMAC) {
		t.Errorf("macs not swapped")
	}
	u, qu := pk.Layer(layers.LayerTypeUDP).(*layers.UDP), rq.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if u.SrcPort != qu.DstPort || u.DstPort != qu.SrcPort {
		t.Errorf("ports not swapped")
	}
	if int(u.Length) != 8+len(u.Payload) {
		t.Errorf("udp length %d for %d bytes of payload", u.Length, len(u.Payload))
	}
	var pseudo uint32
	if ip, ok := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		qip := rq.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if !ip.SrcIP.Equal(qip.DstIP) || !ip.DstIP.Equal(qip.SrcIP) {
			t.Errorf("ipv4 addresses not swapped")
		}
		if int(ip.Length) != 20+8+len(u.Payload) {
			t.Errorf("ipv4 length %d", ip.Length)
		}
		if fold(sum16(0, ip.Contents)) != 0xffff {
			t.Errorf("ipv4 header checksum wrong")
		}
		pseudo = sum16(sum16(0, ip.SrcIP.To4()), ip.DstIP.To4())
	} else {
		ip := pk.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		qip := rq.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		if !ip.SrcIP.Equal(qip.DstIP) || !ip.DstIP.Equal(qip.SrcIP) {
			t.Errorf("ipv6 addresses not swapped")
		}
		if int(ip.Length) != 8+len(u.Payload) {
			t.Errorf("ipv6 payload length %d", ip.Length)
		}
		pseudo = sum16(sum16(0, ip.SrcIP), ip.DstIP)
		if u.Checksum == 0 {
			t.Errorf("ipv6 udp checksum missing")
		}
	}
	pseudo += 17 + uint32(u.Length)
	if u.Checksum != 0 && fold(sum16(sum16(pseudo, u.Contents), u.Payload)) != 0xffff {
		t.Errorf("udp checksum wrong")
	}
	return u.Payload
}

func TestHotGET(t *testing.T) {
	p := load(t, Config{HotGET: true})
	value := string(bytes.Repeat([]byte("v"), 64))
	admit(t, p, "hot", value, 7, time.Time{})
	admit(t, p, "odd", "x", 8, time.Time{}) // an odd body length
	get := func(f frame, line string) []byte {
		f.sport, f.dport, f.payload = 40000, 11311, getReq(0xbeef, line)
		return f.bytes(t)
	}
	hit := func(name string, req []byte, key, value string) {
		t.Run(name, func(t *testing.T) {
			before := statsOf(t, p)[ClassUDPGet]
			act, rep, err := p.Run(req)
			if err != nil {
				t.Fatal(err)
			}
			if act != XDPTx {
				t.Fatalf("action %d, want XDP_TX", act)
			}
			pl := checkReply(t, req, rep)
			want := append([]byte{0xbe, 0xef, 0, 0, 0, 1, 0, 0}, body(key, value)...)
			if !bytes.Equal(pl, want) {
				t.Fatalf("reply %q, want %q", pl, want)
			}
			if statsOf(t, p)[ClassUDPGet].Answered-before.Answered != 1 {
				t.Errorf("answer not counted")
			}
		})
	}
	hit("ipv4", get(frame{}, "get hot\r\n"), "hot", value)
	hit("odd length", get(frame{}, "get odd\r\n"), "odd", "x")
	hit("ipv6", get(frame{v6: true}, "get hot\r\n"), "hot", value)
	hit("vlan", get(frame{vlans: []uint16{5}}, "get hot\r\n"), "hot", value)
	// A request in a frame padded past its IP length (Ethernet's minimum).
	padded := append(get(frame{}, "get odd\r\n"), make([]byte, 20)...)
	hit("padded frame", padded, "odd", "x")

	pass := func(name string, req []byte) {
		t.Run(name, func(t *testing.T) {
			act, out, err := p.Run(req)
			if err != nil {
				t.Fatal(err)
			}
			if act != XDPPass {
				t.Fatalf("action %d, want XDP_PASS", act)
			}
			if !bytes.Equal(out, req) {
				t.Fatalf("a passed packet was changed")
			}
		})
	}
	// Key lengths around the program's word reads: whole words, a
	// partial last word, and the longest keys (read by a helper).
	for _, n := range []int{1, 7, 8, 9, 16, 23, 55, 56, 57, HotKeyMax} {
		key := string(bytes.Repeat([]byte{'a' + byte(n%26)}, n-1)) + "Z"
		admit(t, p, key, "value of "+key, uint64(n), time.Time{})
		hit("key of "+strconv.Itoa(n)+" bytes", get(frame{}, "get "+key+"\r\n"), key, "value of "+key)
		// The same length, another last byte: a miss.
		pass("other key of "+strconv.Itoa(n)+" bytes", get(frame{}, "get "+key[:n-1]+"Y\r\n"))
	}

	// A wrong IPv4 header checksum: the kernel would drop the request;
	// so it is passed up, not answered.
	badIP := get(frame{}, "get hot\r\n")
	badIP[14+10] ^= 0x40
	pass("wrong ipv4 header checksum", badIP)
	pass("miss", get(frame{}, "get cold\r\n"))
	pass("gets", get(frame{}, "gets hot\r\n"))
	pass("two keys", get(frame{}, "get hot odd\r\n"))
	pass("no crlf", get(frame{}, "get hot\n\n"))
	pass("oversize key", get(frame{}, "get "+string(bytes.Repeat([]byte("k"), HotKeyMax+1))+"\r\n"))
	pass("ipv6 extension header", get(frame{ext: []layers.IPProtocol{layers.IPProtocolIPv6Destination}, v6: true}, "get hot\r\n"))
	multi := get(frame{}, "get hot\r\n")
	multi[42+5] = 2 // one of two datagrams
	pass("multi-datagram request", multi)
	// An entry with an expiry is served until it passes, then passed up
	// (no test here bounds how fast a hit comes: the served one expires
	// in an hour).
	admit(t, p, "later", "l", 9, time.Now().Add(time.Hour))
	hit("before expiry", get(frame{}, "get later\r\n"), "later", "l")
	admit(t, p, "brief", "b", 9, time.Now().Add(30*time.Millisecond))
	time.Sleep(40 * time.Millisecond)
	pass("expired", get(frame{}, "get brief\r\n"))
	// A write invalidates; a new fill serves the new value.
	p.Hot().Invalidate([]byte("hot"))
	pass("invalidated", get(frame{}, "get hot\r\n"))
	admit(t, p, "hot", "new", 10, time.Time{})
	hit("refilled", get(frame{}, "get hot\r\n"), "hot", "new")
	// An odd sequence (a write of the slot in progress) passes up.
	i := (*p.Hot().keys.Load())["hot"]
	p.Hot().seq(i).Add(1)
	pass("being written", get(frame{}, "get hot\r\n"))
	p.Hot().seq(i).Add(1)
	hit("written", get(frame{}, "get hot\r\n"), "hot", "new")
	p.Hot().Evict([]byte("hot"))
	pass("evicted", get(frame{}, "get hot\r\n"))
	// Hot answering off: everything passes.
	q := load(t, Config{})
	admitQ := q.Hot().Admit([]byte("hot"), func() (HotValue, error) { return HotValue{Body: body("hot", "v"), Version: 1}, nil })
	if admitQ != nil {
		t.Fatal(admitQ)
	}
	if act, _, _ := q.Run(get(frame{}, "get hot\r\n")); act != XDPPass {
		t.Fatalf("hot off: action %d", act)
	}
}

func TestAdmitRaces(t *testing.T) {
	p := load(t, Config{HotGET: true})
	h := p.Hot()
	// A write between the fill's read and its publish: not served.
	err := h.Admit([]byte("k"), func() (HotValue, error) {
		h.Invalidate([]byte("k"))
		return HotValue{Body: body("k", "old"), Version: 1}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := h.Entries(false); len(e) != 1 || e[0].Served {
		t.Fatalf("a fill raced by a write is served: %+v", e)
	}
	// The version changed by the re-check: not served.
	v := uint64(1)
	err = h.Admit([]byte("k"), func() (HotValue, error) {
		v++
		return HotValue{Body: body("k", "x"), Version: v}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := h.Entries(false); e[0].Served {
		t.Fatalf("a fill whose version changed is served")
	}
	// Unchanged: served.
	admit(t, p, "k", "x", 5, time.Time{})
	if e, _ := h.Entries(false); !e[0].Served {
		t.Fatalf("not served")
	}
	for _, k := range []string{"", "a b", "tab\tkey", string(bytes.Repeat([]byte("k"), HotKeyMax+1))} {
		if err := h.Admit([]byte(k), nil); !errors.Is(err, ErrHotKey) {
			t.Errorf("key %q: %v", k, err)
		}
	}
	err = h.Admit([]byte("big"), func() (HotValue, error) { return HotValue{Body: make([]byte, HotBodyMax+1)}, nil })
	if !errors.Is(err, ErrHotValue) || h.Len() != 1 {
		t.Errorf("oversize value: %v, %d held", err, h.Len())
	}
}

func TestSamples(t *testing.T) {
	p := load(t, Config{})
	r, err := p.Samples()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := p.SetSampling(1, 40, 1<<ClassRESP|1<<ClassOther); err != nil {
		t.Fatal(err)
	}
	pkt := frame{tcp: true, sport: 40000, dport: 6380, payload: bytes.Repeat([]byte("r"), 100)}.bytes(t)
	if _, _, err := p.Run(pkt); err != nil {
		t.Fatal(err)
	}
	s, err := r.Read(time.Now().Add(2 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if s.Len != len(pkt) || !bytes.Equal(s.Data, pkt[:40]) || s.Class != ClassRESP || s.Verdict != "pass" {
		t.Fatalf("sample %+v", s)
	}
	// A class left out of the mask is not sampled.
	p.Run(frame{tcp: true, sport: 40000, dport: 7600}.bytes(t))
	if s, err := r.Read(time.Now().Add(50 * time.Millisecond)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("mgmt sampled: %+v, %v", s, err)
	}
	if err := p.SetSampling(0, 0, 0); err != nil {
		t.Fatal(err)
	}
	p.Run(pkt)
	if _, err := r.Read(time.Now().Add(50 * time.Millisecond)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("sampling off: %v", err)
	}
}

func TestTalkers(t *testing.T) {
	p := load(t, Config{})
	for i, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.2", "fd00::9", "10.0.0.2"} {
		a := net.ParseIP(ip)
		pkt := frame{sport: 1, dport: 53, payload: make([]byte, 10*i), src: a, v6: a.To4() == nil}.bytes(t)
		if _, _, err := p.Run(pkt); err != nil {
			t.Fatal(err)
		}
	}
	top, err := p.Talkers(2)
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != 2 || top[0].Addr.String() != "10.0.0.2" || top[0].Packets != 3 || top[1].Addr.String() != "fd00::9" {
		t.Fatalf("top talkers: %+v", top)
	}
}

// TestInvalidateWhileClosing: writers invalidating held keys while the
// program closes do not touch unmapped memory.
func TestInvalidateWhileClosing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading XDP programs needs root")
	}
	p, err := Load(Config{HotGET: true})
	if err != nil {
		t.Fatal(err)
	}
	admit(t, p, "k", "v", 1, time.Time{})
	h := p.Hot()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				h.Invalidate([]byte("k"))
			}
		}
	}()
	time.Sleep(10 * time.Millisecond)
	p.Close()
	time.Sleep(10 * time.Millisecond)
	close(stop)
	<-done
}
