package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/hecsys/hec/bpf"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/host/cluster"
	"github.com/hecsys/hec/shared/api"
)

// The xdp scenario (issue: the eBPF/XDP fast path):
//
//  1. ns per packet of the program (BPF_PROG_TEST_RUN, no NIC): classify
//     and pass a RESP packet, and answer a UDP GET from the hot map with a
//     64-byte value, checked as a ratio to the pass-everything program
//     timed the same way in the same run (five rounds, median).
//  2. At an offered load of UDP GETs for one hot key from node 1 of a
//     two-node cluster (100k GET/s; a path that cannot serve it has its
//     capacity found by halving the load, and the comparison is made at a
//     load every path serves), the serving node's CPU-seconds per 100k GETs: hecd
//     with hot GETs answered in XDP, hecd without (user space), and
//     memcached (UDP) in the same namespace. The serving node's CPU is its
//     server process plus the threaded-NAPI kernel thread of its veth
//     (where XDP and the kernel's receive path run), both pinned to core
//  0. The switch side's NAPI threads (the bridge between the nodes)
//     run on core 0 too, not counted; the load generator on core 1.
func benchXDP(ctx context.Context, rep *Report, quick bool) error {
	const s = "xdp"
	if os.Geteuid() != 0 {
		return fmt.Errorf("the xdp scenario loads XDP programs and makes namespaces: run make bench as root")
	}
	if err := benchXDPProgram(rep, quick); err != nil {
		return err
	}
	for _, bin := range []string{"memcached", "taskset"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not installed (make bench installs memcached as root): %w", bin, err)
		}
	}
	dir, hecd, err := scratchHecd("xdp")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// A quick run offers half the load: user space does not serve 100,000
	// GET/s here, and the comparison, at a load every path serves, would
	// then be run again.
	rate, secs := 100_000, 2.5
	if quick {
		rate, secs = 50_000, 1
	}
	value := strings.Repeat("v", 64)
	type result struct{ cpu, replies, answered float64 }
	measure := func(name string, hotKeys int, memcached bool, rate int) (result, error) {
		var r result
		state := filepath.Join(dir, "cluster-"+name)
		cname := "bx" + name
		cluster.Down(cname, state, nil)
		st, err := cluster.Up(ctx, cluster.Options{Name: cname, Agents: 2, Hecd: hecd, StateDir: state, XDP: "native",
			AgentArgs: []string{"--hot-keys", strconv.Itoa(hotKeys), "--hot-min-rate", "50"}})
		if err != nil {
			return r, err
		}
		defer cluster.Down(cname, state, nil)
		srv := st.Nodes[1]
		pid, port := srv.PID, api.PortUDP
		if memcached {
			mc, err := st.Exec(2, "memcached", "-u", "root", "-l", srv.Addr, "-p", "11212", "-U", "11211", "-t", "1", "-m", "64")
			if err != nil {
				return r, err
			}
			if err := mc.Start(); err != nil {
				return r, fmt.Errorf("memcached: %w", err)
			}
			defer func() { mc.Process.Kill(); mc.Wait() }()
			pid, port = mc.Process.Pid, 11211
			if err := memcachedSet(ctx, st.Nodes[0].NS, srv.Addr+":11212", "hot", value); err != nil {
				return r, err
			}
		} else if err := respSet(ctx, st.Nodes[0].NS, net.JoinHostPort(srv.Addr, strconv.Itoa(api.PortRESP)), srv.Token(), "hot", value); err != nil {
			return r, err
		}
		// The serving node ends at its veth: its NAPI runs in a thread
		// of its own on core 0, counted. The switch side's (the bridge,
		// the way to node 1) run in threads of theirs, not counted, on
		// core 0 too: handing a frame to the network is then a local
		// wake-up, as handing it to a NIC is, not an inter-processor
		// interrupt, which costs microseconds in a VM.
		napi, err := threadedNAPI(srv.NS, "eth0")
		if err != nil {
			return r, err
		}
		for _, p := range append([]int{pid}, napi...) {
			if err := exec.Command("taskset", "-a", "-p", "-c", "0", strconv.Itoa(p)).Run(); err != nil {
				return r, fmt.Errorf("pin %d to core 0: %w", p, err)
			}
		}
		for _, v := range []string{"v1", "v2"} {
			far, err := threadedNAPI(st.Switch, v)
			if err != nil {
				return r, err
			}
			for _, p := range far {
				if err := exec.Command("taskset", "-p", "-c", "0", strconv.Itoa(p)).Run(); err != nil {
					return r, fmt.Errorf("pin %d to core 0: %w", p, err)
				}
			}
		}
		var mask unix.CPUSet
		unix.SchedGetaffinity(0, &mask)
		defer unix.SchedSetaffinity(0, &mask)
		var one unix.CPUSet
		one.Set(1)
		unix.SchedSetaffinity(0, &one)
		to := fmt.Sprintf("%s:%d", srv.Addr, port)
		// Warm up: the key becomes hot and is admitted.
		if _, err := udpLoad(st.Nodes[0].NS, to, rate, 0.6, nil); err != nil {
			return r, err
		}
		before := xdpAnswered(st.Switch, srv.Mgmt(), srv.Token())
		cpu0 := runTime(pid)
		for _, p := range napi {
			cpu0 += runTime(p)
		}
		replies, err := udpLoad(st.Nodes[0].NS, to, rate, secs, []byte(value))
		if err != nil {
			return r, err
		}
		cpu1 := runTime(pid)
		for _, p := range napi {
			cpu1 += runTime(p)
		}
		r.cpu, r.replies = cpu1-cpu0, float64(replies)
		r.answered = xdpAnswered(st.Switch, srv.Mgmt(), srv.Token()) - before
		return r, nil
	}
	paths := []struct {
		name, label string
		hot         int
		mc          bool
	}{
		{"hot", "hecd, hot GETs answered in XDP", 1024, false},
		{"user", "hecd, XDP on, hot GETs off (user space)", 0, false},
		{"mc", "memcached 1.6 UDP, same node (one thread)", 0, true},
	}
	// Each path at the offered load; one that cannot serve it (95 % of
	// the replies) has its capacity found by halving the load, and the CPU
	// comparison is made again at a load every path serves.
	results := make([]result, len(paths))
	served := make([]int, len(paths))
	common := rate
	for i, c := range paths {
		for r := rate; ; r /= 2 {
			progress(s, "%s at %d GET/s", c.name, r)
			res, err := measure(c.name, c.hot, c.mc, r)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if r == rate {
				results[i] = res
			}
			if res.replies >= 0.95*float64(r)*secs {
				served[i] = r
				break
			}
			if r <= rate/16 {
				break // served[i] stays 0: less than rate/16
			}
		}
		if served[i] < rate {
			rep.add(s, fmt.Sprintf("capacity (the highest load tried, halving from %d GET/s, with 95 %% of replies), %s", rate, c.label), float64(served[i]), "GET/s")
		}
		if served[i] > 0 {
			common = min(common, served[i])
		}
	}
	// The comparison at the common load, repeated; the search's runs at
	// the offered load count as the first when every path served it.
	reps := 2
	if quick {
		reps = 1
	}
	runs := make([][]result, len(paths))
	if common == rate {
		for i := range paths {
			runs[i] = append(runs[i], results[i])
		}
	}
	for len(runs[0]) < reps {
		for i, c := range paths {
			progress(s, "%s at %d GET/s (%d/%d)", c.name, common, len(runs[i])+1, reps)
			res, err := measure(c.name, c.hot, c.mc, common)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			runs[i] = append(runs[i], res)
		}
	}
	per := make([][]float64, len(paths))
	for i, c := range paths {
		var inXDP []float64
		for _, res := range runs[i] {
			per[i] = append(per[i], res.cpu/res.replies*100_000)
			inXDP = append(inXDP, res.answered/res.replies*100)
		}
		rep.addN(s, fmt.Sprintf("serving CPU-seconds per 100k UDP GETs at %d GET/s, %s", common, c.label), per[i], "CPU-s")
		if !c.mc {
			rep.addN(s, fmt.Sprintf("GETs answered in XDP, %s", c.label), inXDP, "%")
		}
	}
	rep.atLeastN(s, "serving CPU per GET: user space / XDP hot GETs", ratio(per[1], per[0]), 5, "×")
	rep.addN(s, "serving CPU per GET: memcached UDP / XDP hot GETs", ratio(per[2], per[0]), "×")
	return nil
}

// benchXDPProgram measures the program itself with BPF_PROG_TEST_RUN.
func benchXDPProgram(rep *Report, quick bool) error {
	const s = "xdp"
	p, err := bpf.Load(bpf.Config{Ports: bpf.Ports{RESP: api.PortRESP, UDPGet: api.PortUDP, Peer: api.PortPeer, Mgmt: api.PortMgmt}, HotGET: true})
	if err != nil {
		return err
	}
	defer p.Close()
	value := strings.Repeat("v", 64)
	body := []byte("VALUE hot 0 64\r\n" + value + "\r\nEND\r\n")
	if err := p.Hot().Admit([]byte("hot"), func() (bpf.HotValue, error) { return bpf.HotValue{Body: body, Version: 1}, nil }); err != nil {
		return err
	}
	resp := benchFrame(false, api.PortRESP, []byte("*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n"))
	get := benchFrame(true, api.PortUDP, append([]byte{0, 1, 0, 0, 0, 1, 0, 0}, "get hot\r\n"...))
	n := 2_000_000
	runs := 200_000
	if quick {
		n, runs = 200_000, 20_000
	}
	act, pass, err := p.Benchmark(resp, n)
	if err != nil || act != bpf.XDPPass {
		return fmt.Errorf("classify-and-pass: action %d, %v", act, err)
	}
	// A hit rewrites its packet into the reply, which a second run in the
	// same call would see: one run per call, as the kernel times it,
	// averaged, less the cost of timing a single run (BPF_PROG_TEST_RUN's
	// clock reads around it): single runs of the pass-everything program
	// less its repeated runs.
	one := func(prog *ebpf.Program, pkt []byte, want uint32) (float64, error) {
		var sum time.Duration
		for i := 0; i < runs; i++ {
			act, d, err := prog.Benchmark(pkt, 1, nil)
			if err != nil || act != want {
				return 0, fmt.Errorf("action %d, want %d: %v", act, want, err)
			}
			sum += d
		}
		return float64(sum.Nanoseconds()) / float64(runs), nil
	}
	null, err := bpf.LoadPass()
	if err != nil {
		return err
	}
	defer null.Close()
	_, nullRep, err := null.Benchmark(resp, n, nil)
	if err != nil {
		return err
	}
	nullOne, err := one(null, resp, bpf.XDPPass)
	if err != nil {
		return err
	}
	overhead := nullOne - float64(nullRep.Nanoseconds())
	// The hit against the floor timed the same way (single runs of the
	// pass-everything program), in five alternating rounds: a ratio from
	// the same run, where an absolute time would say more about the
	// machine than the program.
	var hits, floors, ratios []float64
	for range 5 {
		f, err := one(null, resp, bpf.XDPPass)
		if err != nil {
			return err
		}
		h, err := one(p.Program(), get, bpf.XDPTx)
		if err != nil {
			return fmt.Errorf("cache hit: %w", err)
		}
		hits, floors, ratios = append(hits, h), append(floors, f), append(ratios, h/f)
	}
	hit, _, _, _ := spread(append([]float64(nil), hits...))
	rep.add(s, fmt.Sprintf("classify and pass a RESP packet (prog.Benchmark, %d runs)", n), pass, "ns/packet")
	rep.addN(s, fmt.Sprintf("cache hit, 64-byte value, XDP_TX: %d single runs, kernel-timed, mean", runs), hits, "ns/packet")
	rep.addN(s, fmt.Sprintf("pass-everything program: %d single runs, kernel-timed, mean (the floor)", runs), floors, "ns/packet")
	rep.add(s, "the timing of a single run (pass-everything program: single runs less repeated runs)", overhead, "ns")
	rep.add(s, "cache hit, 64-byte value, XDP_TX, less the timing of a single run", hit-overhead, "ns/packet")
	rep.atMostN(s, "cache hit / pass-everything floor, both single runs timed the same way", ratios, 6, "×")
	return nil
}

// benchFrame builds an Ethernet/IPv4 frame from 10.99.0.1:40000 to
// 10.99.0.2:port, over UDP or TCP.
func benchFrame(udp bool, port uint16, payload []byte) []byte {
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
		EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, SrcIP: net.IP{10, 99, 0, 1}, DstIP: net.IP{10, 99, 0, 2}}
	var l4 gopacket.SerializableLayer
	if udp {
		ip.Protocol = layers.IPProtocolUDP
		u := &layers.UDP{SrcPort: 40000, DstPort: layers.UDPPort(port)}
		u.SetNetworkLayerForChecksum(ip)
		l4 = u
	} else {
		ip.Protocol = layers.IPProtocolTCP
		t := &layers.TCP{SrcPort: 40000, DstPort: layers.TCPPort(port), ACK: true, PSH: true, Window: 500}
		t.SetNetworkLayerForChecksum(ip)
		l4 = t
	}
	buf := gopacket.NewSerializeBuffer()
	gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, l4, gopacket.Payload(payload))
	return buf.Bytes()
}

// threadedNAPI switches ifname in namespace ns to threaded NAPI and
// returns the pids of the kernel threads that appeared for it.
func threadedNAPI(ns, ifname string) ([]int, error) {
	before := napiThreads()
	if out, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c", "echo 1 > /sys/class/net/"+ifname+"/threaded").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("threaded NAPI on %s: %v: %s", ifname, err, out)
	}
	var pids []int
	for i := 0; i < 50 && len(pids) == 0; i++ {
		for pid, name := range napiThreads() {
			if _, ok := before[pid]; !ok && strings.HasPrefix(name, "napi/"+ifname) {
				pids = append(pids, pid)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("no napi/%s thread appeared", ifname)
	}
	return pids, nil
}

func napiThreads() map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && bytes.HasPrefix(b, []byte("napi/")) {
			out[pid] = strings.TrimSpace(string(b))
		}
	}
	return out
}

// udpLoad offers rate GETs per second for secs from namespace ns, and
// counts the replies (checking the value when want is set).
func udpLoad(ns, to string, rate int, secs float64, want []byte) (int, error) {
	pc, err := cluster.ListenPacketIn(ns, "udp4", ":0")
	if err != nil {
		return 0, err
	}
	defer pc.Close()
	dst, err := net.ResolveUDPAddr("udp4", to)
	if err != nil {
		return 0, err
	}
	// sendmmsg and recvmmsg (64 a call) keep the generator's own cost low.
	bc := ipv4.NewPacketConn(pc)
	const batch = 64
	var replies, bad atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		ms := make([]ipv4.Message, batch)
		for i := range ms {
			ms[i].Buffers = [][]byte{make([]byte, 2048)}
		}
		for {
			n, err := bc.ReadBatch(ms, 0)
			if err != nil {
				return
			}
			for _, m := range ms[:n] {
				if want != nil && !bytes.Contains(m.Buffers[0][:m.N], want) {
					bad.Add(1)
					continue
				}
				replies.Add(1)
			}
		}
	}()
	out := make([]ipv4.Message, batch)
	for i := range out {
		out[i].Buffers = [][]byte{append([]byte{0, 0, 0, 0, 0, 1, 0, 0}, "get hot\r\n"...)}
		out[i].Addr = dst
	}
	// Small bursts: a veth's ring holds 256 frames.
	const tick = 100 * time.Microsecond
	per := float64(rate) * tick.Seconds()
	start := time.Now()
	total := int(float64(rate) * secs)
	for sent, id := 0, uint16(0); sent < total; {
		due := min(int(float64(time.Since(start)/tick+1)*per), total)
		for sent < due {
			n := min(due-sent, batch)
			for i := range n {
				id++
				binary.BigEndian.PutUint16(out[i].Buffers[0], id)
			}
			w, err := bc.WriteBatch(out[:n], 0)
			if err != nil {
				return 0, err
			}
			sent += w
		}
		time.Sleep(time.Until(start.Add(time.Duration(float64(sent)/per) * tick)))
	}
	time.Sleep(200 * time.Millisecond) // the last replies
	pc.Close()
	<-done
	if bad.Load() > 0 {
		return 0, fmt.Errorf("%d replies without the value", bad.Load())
	}
	return int(replies.Load()), nil
}

// xdpAnswered reads the UDP GETs answered in XDP from the agent.
func xdpAnswered(switchNS, mgmt, token string) float64 {
	st, err := (&host.Mgmt{Addr: mgmt, HTTP: cluster.Client(switchNS), Token: token}).XDP(context.Background(), 0)
	if err != nil {
		return 0
	}
	c, _ := st.Class("udp_get")
	return float64(c.Answered)
}

func respSet(ctx context.Context, ns, addr, token, key, value string) error {
	c, err := cluster.DialIn(ctx, ns, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(c, "*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(token), token)
	if err := expectLine(c, "+OK"); err != nil {
		return fmt.Errorf("AUTH: %w", err)
	}
	fmt.Fprintf(c, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(key), key, len(value), value)
	return expectLine(c, "+OK")
}

func memcachedSet(ctx context.Context, ns, addr, key, value string) error {
	var c net.Conn
	var err error
	for i := 0; i < 100; i++ { // memcached takes a moment to listen
		if c, err = cluster.DialIn(ctx, ns, "tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(c, "set %s 0 0 %d\r\n%s\r\n", key, len(value), value)
	return expectLine(c, "STORED")
}

func expectLine(c net.Conn, want string) error {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 256)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(buf[:n]), want) {
		return fmt.Errorf("want %s, got %q", want, buf[:n])
	}
	return nil
}

// runTime is the CPU time of all of pid's threads in seconds, from the
// scheduler's nanosecond accounting (/proc/PID/task/*/schedstat), which
// includes the softirq work done in their context.
func runTime(pid int) float64 {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var ns float64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			v, _ := strconv.ParseFloat(f[0], 64)
			ns += v
		}
	}
	return ns / 1e9
}
