package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hecsys/hec/dpu"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/verbs"
	"github.com/hecsys/hec/test/handofftest"
)

// Result is what the client prints: per transport, the ping's round trip
// (p50, µs) and each bulk size's rate (GB/s) and this process's CPU per
// GB moved (user and system, ms).
type Result struct {
	Transport string             `json:"transport"`
	PingP50US float64            `json:"ping_p50_us"`
	GBps      map[string]float64 `json:"gb_per_s"`
	CPUmsGB   map[string]float64 `json:"cpu_ms_per_gb"`
}

var sizes = []struct {
	name  string
	bytes int
	times int
}{{"1MiB", 1 << 20, 32}, {"64MiB", 64 << 20, 2}}

const pings = 200

func main() {
	role := flag.String("role", "client", "server or client")
	rdmaAddr := flag.String("rdma", "10.9.0.1:7471", "the server's RDMA CM address")
	tcpAddr := flag.String("tcp", "10.9.0.1:7472", "the server's TCP address")
	handoffTCP := flag.String("handoff-tcp", "10.9.0.1:7473", "the server's agent's TCP handoff")
	handoffRDMA := flag.String("handoff-rdma", "10.9.0.1:7474", "the server's agent's RDMA handoff")
	flag.Parse()
	agentTargets = []string{"rdma://" + *handoffRDMA, "tcp://" + *handoffTCP}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var err error
	if *role == "server" {
		var stop, stopPeers func()
		var clients map[string]*host.Client
		if stop, err = runAgent(*handoffTCP, *handoffRDMA); err == nil {
			if clients, stopPeers, err = peerAgents(1, "10.9.0.1"); err == nil {
				err = serve(ctx, *rdmaAddr, *tcpAddr, func() error { _, err := peerCollectives(ctx, clients); return err })
				stopPeers()
			}
			stop()
		}
	} else {
		err = client(ctx, *rdmaAddr, *tcpAddr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rdmaperf:", err)
		os.Exit(1)
	}
}

func cpu() time.Duration {
	var r syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r)
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

const regionSize = 64 << 20

// A poller spins spinPolls empty polls, then sleeps pollSleep between
// polls, as the ring's waiter does.
const (
	spinPolls = 200
	pollSleep = 20 * time.Microsecond
)

// early are completions polled while another was awaited (an echo can
// complete before the send it answers is seen complete).
var early = map[uint64]int{}

// await polls q until completion id (spinning, as a transport's poller
// does while an op is due).
func await(ctx context.Context, q *verbs.QP, id uint64) error {
	if early[id] > 0 {
		early[id]--
		return nil
	}
	var cs []verbs.Completion
	for spins := 0; ctx.Err() == nil; spins++ {
		var err error
		if cs, err = q.Poll(cs[:0]); err != nil {
			return err
		}
		if len(cs) == 0 && spins >= spinPolls {
			// Spin, then sleep: on soft-RoCE the "NIC" is this machine's
			// kernel, which a spinning poller starves of its CPU.
			time.Sleep(pollSleep)
		}
		found := false
		for _, c := range cs {
			if c.Err != nil {
				return c.Err
			}
			if c.ID == id && !found {
				found = true
				continue
			}
			early[c.ID]++
		}
		if found {
			return nil
		}
	}
	return ctx.Err()
}

// serve answers the client's measurements of the link; when the client
// says its agents are up, it runs peers (this side's collectives).
func serve(ctx context.Context, rdmaAddr, tcpAddr string, peers func() error) error {
	ap, err := netip.ParseAddrPort(rdmaAddr)
	if err != nil {
		return err
	}
	l, err := verbs.Listen(ap)
	if err != nil {
		return err
	}
	defer l.Close()
	tl, err := net.Listen("tcp", tcpAddr)
	if err != nil {
		return err
	}
	defer tl.Close()
	fmt.Fprintln(os.Stderr, "rdmaperf: listening")
	c, err := l.Accept(ctx, 64, func([]byte) ([]byte, error) { return nil, nil })
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "rdmaperf: accepted")
	defer c.Close()
	r, err := c.Device.Register(regionSize)
	if err != nil {
		return err
	}
	defer r.Close()
	// The region's key, then the pings echoed; the bulk writes need
	// nothing of this side but its region. The client's last message says
	// it is done.
	k := r.Key()
	msg := k.Append(nil)
	copy(r.Buf, msg)
	if err := c.QP.PostRecv(r, 4096, 64, 1); err != nil {
		return err
	}
	if err := c.QP.Post(verbs.Work{Op: verbs.Send, ID: 100, Region: r, Len: len(msg), Signaled: true}); err != nil {
		return err
	}
	if err := await(ctx, c.QP, 100); err != nil {
		return err
	}
	for i := 0; i <= pings; i++ { // the last is the client's "done"
		if err := await(ctx, c.QP, 1); err != nil {
			return err
		}
		if i == pings {
			break
		}
		if err := c.QP.PostRecv(r, 4096, 64, 1); err != nil {
			return err
		}
		if err := c.QP.Post(verbs.Work{Op: verbs.Send, ID: 2, Region: r, Off: 8192, Len: 64, Signaled: true}); err != nil {
			return err
		}
		if err := await(ctx, c.QP, 2); err != nil {
			return err
		}
	}
	fmt.Fprintln(os.Stderr, "rdmaperf: RDMA done; TCP")
	// TCP: pings echoed, then each size's bytes read and acknowledged.
	conn, err := tl.Accept()
	if err != nil {
		return err
	}
	defer conn.Close()
	buf := make([]byte, 1<<20)
	for range pings {
		if _, err := io.ReadFull(conn, buf[:64]); err != nil {
			return err
		}
		if _, err := conn.Write(buf[:64]); err != nil {
			return err
		}
	}
	for _, s := range sizes {
		left := s.bytes * s.times
		for left > 0 {
			n, err := conn.Read(buf[:min(len(buf), left)])
			if err != nil {
				return err
			}
			left -= n
		}
		if _, err := conn.Write([]byte{1}); err != nil {
			return err
		}
	}
	// The client measures the agent's handoffs, then says its agents
	// are up (peers), then that it is done.
	var said [1]byte
	if _, err := io.ReadFull(conn, said[:]); err != nil {
		return err
	}
	if err := peers(); err != nil {
		return err
	}
	_, err = io.ReadFull(conn, said[:])
	return err
}

// agentTargets are the server's agent's handoffs, RDMA's first.
var agentTargets []string

// runAgent runs an agent (hecd's core, in this process) serving the
// handoff over TCP and over RDMA.
func runAgent(tcpAddr, rdmaAddr string) (stop func(), err error) {
	state, err := os.MkdirTemp("", "rdmaperf-agent")
	if err != nil {
		return nil, err
	}
	a, stop, err := handofftest.RunAgent(dpu.Config{Agent: dpu.AgentConfig{Shm: dpu.Off, TCP: tcpAddr, Mgmt: dpu.Off, StateDir: state, Insecure: true},
		RESP: dpu.RESPConfig{Addr: dpu.Off}, UDP: dpu.UDPConfig{Addr: dpu.Off}, RDMA: dpu.RDMAConfig{Listen: rdmaAddr}}, nil)
	if err != nil {
		return nil, err
	}
	if st := a.Status(); st.RDMA == nil || !strings.Contains(st.RDMA.Rail, "rdma://") {
		stop()
		return nil, fmt.Errorf("the agent serves no RDMA handoff: %+v", st.RDMA)
	}
	return stop, nil
}

// handoffSizes are the checksums measured through the agent: buffers of
// the client's window (Alloc), so that RDMA hands them over without a
// copy on this side.
var handoffSizes = []struct {
	name  string
	bytes int
	times int
}{{"1MiB", 1 << 20, 32}, {"16MiB", 16 << 20, 4}}

// measureHandoff measures an agent's handoff at target: ping p50 (the
// agent's ping op) and checksums of window buffers.
func measureHandoff(ctx context.Context, target string) (Result, error) {
	r := Result{Transport: "handoff " + strings.SplitN(target, ":", 2)[0], GBps: map[string]float64{}, CPUmsGB: map[string]float64{}}
	var c *host.Client
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err = host.Dial(ctx, target); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return r, err
		}
	}
	defer c.Close()
	fmt.Fprintf(os.Stderr, "rdmaperf: %s: pings\n", c)
	var rtts []time.Duration
	for range pings {
		t0 := time.Now()
		if err := c.Ping(ctx); err != nil {
			return r, err
		}
		rtts = append(rtts, time.Since(t0))
	}
	r.PingP50US = p50(rtts)
	for _, s := range handoffSizes {
		b, err := c.Alloc(s.bytes)
		if err != nil {
			return r, err
		}
		for i := range b {
			b[i] = byte(i)
		}
		fmt.Fprintf(os.Stderr, "rdmaperf: %s: %d checksums of %s\n", target, s.times, s.name)
		c0, t0 := cpu(), time.Now()
		for range s.times {
			if _, err := c.Checksum(ctx, b); err != nil {
				return r, err
			}
		}
		record(&r, s.name, s.bytes*s.times, time.Since(t0), cpu()-c0)
		c.Free(b)
	}
	return r, nil
}

func client(ctx context.Context, rdmaAddr, tcpAddr string) error {
	ap, err := netip.ParseAddrPort(rdmaAddr)
	if err != nil {
		return err
	}
	var c *verbs.Conn
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if c, _, err = verbs.Dial(ctx, ap, nil, 64); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dial %v: %w", ap, err)
		}
	}
	defer c.Close()
	r, err := c.Device.Register(regionSize)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := c.QP.PostRecv(r, 0, 64, 1); err != nil {
		return err
	}
	if err := await(ctx, c.QP, 1); err != nil {
		return err
	}
	remote, err := verbs.ParseRemoteKey(r.Buf)
	if err != nil {
		return err
	}
	res := []Result{{Transport: "rdma", GBps: map[string]float64{}, CPUmsGB: map[string]float64{}},
		{Transport: "tcp", GBps: map[string]float64{}, CPUmsGB: map[string]float64{}}}

	// RDMA: bulk first (the server is waiting on its receive), then the
	// pings, the last send telling the server it is done.
	fmt.Fprintln(os.Stderr, "rdmaperf: connected; RDMA writes")
	for _, s := range sizes {
		c0, t0 := cpu(), time.Now()
		for i := range s.times {
			if err := c.QP.Post(verbs.Work{Op: verbs.Write, ID: uint64(10 + i), Region: r, Len: s.bytes, Remote: remote, Signaled: true}); err != nil {
				return err
			}
			if err := await(ctx, c.QP, uint64(10+i)); err != nil {
				return err
			}
		}
		record(&res[0], s.name, s.bytes*s.times, time.Since(t0), cpu()-c0)
	}
	fmt.Fprintln(os.Stderr, "rdmaperf: RDMA pings")
	var rtts []time.Duration
	for i := 0; i <= pings; i++ {
		if i < pings {
			if err := c.QP.PostRecv(r, 0, 64, 3); err != nil {
				return err
			}
		}
		t0 := time.Now()
		if err := c.QP.Post(verbs.Work{Op: verbs.Send, ID: 4, Region: r, Off: 4096, Len: 64, Signaled: true}); err != nil {
			return err
		}
		if i < pings { // the round trip: to the echo's arrival
			if err := await(ctx, c.QP, 3); err != nil {
				return err
			}
			rtts = append(rtts, time.Since(t0))
		}
		if err := await(ctx, c.QP, 4); err != nil { // the send's own completion (its ACK)
			return err
		}
	}
	res[0].PingP50US = p50(rtts)

	fmt.Fprintln(os.Stderr, "rdmaperf: TCP")
	var conn net.Conn
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if conn, err = net.Dial("tcp", tcpAddr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return err
		}
	}
	defer conn.Close()
	rtts = rtts[:0]
	buf := make([]byte, 64)
	for range pings {
		t0 := time.Now()
		if _, err := conn.Write(buf); err != nil {
			return err
		}
		if _, err := io.ReadFull(conn, buf); err != nil {
			return err
		}
		rtts = append(rtts, time.Since(t0))
	}
	res[1].PingP50US = p50(rtts)
	for _, s := range sizes {
		c0, t0 := cpu(), time.Now()
		for range s.times {
			if _, err := conn.Write(r.Buf[:s.bytes]); err != nil {
				return err
			}
		}
		var ack [1]byte
		if _, err := io.ReadFull(conn, ack[:]); err != nil {
			return errors.Join(errors.New("tcp: no acknowledgement"), err)
		}
		record(&res[1], s.name, s.bytes*s.times, time.Since(t0), cpu()-c0)
	}
	fmt.Fprintln(os.Stderr, "rdmaperf: the agent's handoffs")
	for _, target := range agentTargets {
		r, err := measureHandoff(ctx, target)
		if err != nil {
			return fmt.Errorf("%s: %w", target, err)
		}
		res = append(res, r)
	}
	fmt.Fprintln(os.Stderr, "rdmaperf: the agents' peer links")
	clients, stopPeers, err := peerAgents(2, "10.9.0.2")
	if err != nil {
		return err
	}
	defer stopPeers()
	if _, err := conn.Write([]byte{'p'}); err != nil { // the server's ranks may start
		return err
	}
	pr, err := peerCollectives(ctx, clients)
	if err != nil {
		return err
	}
	res = append(res, pr...)
	if _, err := conn.Write([]byte{1}); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

func record(r *Result, size string, bytes int, wall, cpu time.Duration) {
	gb := float64(bytes) / 1e9
	r.GBps[size] = gb / wall.Seconds()
	r.CPUmsGB[size] = float64(cpu.Milliseconds()) / gb
}

func p50(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Nanoseconds()) / 1e3
}
