package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hecsys/hec/test/testutil"

	"github.com/redis/go-redis/v9"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/host/cluster"
	"github.com/hecsys/hec/shared/api"
)

// xdpCluster makes a cluster of two agents with XDP on their veths; node
// 1 is the client's namespace, node 2 the server.
func xdpCluster(t *testing.T, name, mode string, args ...string) *cluster.State {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("XDP on veths in namespaces: root only (CI runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip (iproute2): make test installs it as root")
	}
	bin := testutil.Hecd(t)
	dir := filepath.Join(t.TempDir(), "state")
	cluster.Down(name, dir, nil)
	var log bytes.Buffer
	st, err := cluster.Up(context.Background(), cluster.Options{Name: name, Agents: 2, Hecd: bin, StateDir: dir, XDP: mode,
		AgentArgs: append([]string{"--hot-min-rate", "5"}, args...), Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "node2", "hecd.log"))
			t.Logf("node 2's log:\n%s", b)
		}
		if err := cluster.Down(name, dir, nil); err != nil {
			t.Errorf("down: %v", err)
		}
		if left := cluster.Remains(name, dir, []int{st.Nodes[0].PID, st.Nodes[1].PID}); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})
	return st
}

// mgmtFromSwitch is a client of node n's management API from the
// switch's namespace (not node 1's, which the allow-list tests deny).
func mgmtFromSwitch(st *cluster.State, n int) *host.Mgmt {
	return &host.Mgmt{Addr: st.Nodes[n].Mgmt(), HTTP: cluster.Client(st.Switch), Token: st.Nodes[n].Token()}
}

func xdpStatus(t *testing.T, st *cluster.State, n int) api.XDPStatus {
	t.Helper()
	s, err := mgmtFromSwitch(st, n).XDP(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func classOf(s api.XDPStatus, name string) api.XDPClass {
	c, _ := s.Class(name)
	return c
}

// udpGetter sends memcached UDP GETs from a namespace.
type udpGetter struct {
	pc   net.PacketConn
	to   *net.UDPAddr
	id   uint16
	buf  []byte
	wait time.Duration
}

func newUDPGetter(t *testing.T, ns, server string) *udpGetter {
	t.Helper()
	pc, err := cluster.ListenPacketIn(ns, "udp4", ":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	to, _ := net.ResolveUDPAddr("udp4", server)
	return &udpGetter{pc: pc, to: to, buf: make([]byte, 2048), wait: 500 * time.Millisecond}
}

// get returns the value (nil for a miss), or an error when no reply came.
func (g *udpGetter) get(key string) ([]byte, error) {
	g.id++
	req := []byte{byte(g.id >> 8), byte(g.id), 0, 0, 0, 1, 0, 0}
	req = append(req, "get "+key+"\r\n"...)
	if _, err := g.pc.WriteTo(req, g.to); err != nil {
		return nil, err
	}
	g.pc.SetReadDeadline(time.Now().Add(g.wait))
	for {
		n, _, err := g.pc.ReadFrom(g.buf)
		if err != nil {
			return nil, err
		}
		b := g.buf[:n]
		if n < 8 || binary.BigEndian.Uint16(b) != g.id {
			continue // a late reply to an earlier request
		}
		b = b[8:]
		if bytes.Equal(b, []byte("END\r\n")) {
			return nil, nil
		}
		line, rest, ok := bytes.Cut(b, []byte("\r\n"))
		f := strings.Fields(string(line))
		if !ok || len(f) < 4 || f[0] != "VALUE" || f[1] != key {
			return nil, fmt.Errorf("reply %q", b)
		}
		l, _ := strconv.Atoi(f[3])
		if len(rest) != l+len("\r\nEND\r\n") {
			return nil, fmt.Errorf("reply %q", b)
		}
		return append([]byte(nil), rest[:l]...), nil
	}
}

// getInBackground GETs key every gap until the returned stop is called
// (stop waits for the last GET).
func (g *udpGetter) getInBackground(key string, gap time.Duration) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
				g.get(key)
				time.Sleep(gap)
			}
		}
	}()
	return func() { close(quit); <-done }
}

func respIn(t *testing.T, st *cluster.State, n int) *redis.Client {
	ns := st.Nodes[0].NS
	rc := redis.NewClient(&redis.Options{Addr: st.Nodes[n].Addr + ":6380", Password: st.Nodes[n].Token(), Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return cluster.DialIn(ctx, ns, network, addr)
	}})
	t.Cleanup(func() { rc.Close() })
	return rc
}

// TestXDPOnVeth: real traffic between two namespaces through the
// program on the server's veth, in native and in generic mode: counted
// by class, hot GETs answered in XDP, the allow-list, samples.
func TestXDPOnVeth(t *testing.T) {
	for _, mode := range []string{"native", "generic"} {
		t.Run(mode, func(t *testing.T) {
			st := xdpCluster(t, "x"+mode[:3], mode)
			s := xdpStatus(t, st, 1)
			if s.Mode != mode || s.Interface != "eth0" {
				t.Fatalf("attached %s on %s, want %s on eth0", s.Mode, s.Interface, mode)
			}
			ctx := context.Background()
			rc := respIn(t, st, 1)
			value := strings.Repeat("v", 64)
			if err := rc.Set(ctx, "hot", value, 0).Err(); err != nil {
				t.Fatal(err)
			}
			g := newUDPGetter(t, st.Nodes[0].NS, st.Nodes[1].Addr+":11311")
			// Hot after a round with >= 1 GET reaching user space.
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				v, err := g.get("hot")
				if err != nil || string(v) != value {
					t.Fatalf("get: %q, %v", v, err)
				}
				if s := xdpStatus(t, st, 1); s.Hot != nil && s.Hot.Served > 0 {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			before := classOf(xdpStatus(t, st, 1), "udp_get")
			for i := 0; i < 100; i++ {
				if v, err := g.get("hot"); err != nil || string(v) != value {
					t.Fatalf("get %d: %q, %v", i, v, err)
				}
			}
			after := xdpStatus(t, st, 1)
			u := classOf(after, "udp_get")
			if d := u.Answered - before.Answered; d < 100 {
				t.Errorf("%d of 100 GETs answered in XDP", d)
			}
			if classOf(after, "resp").Packets == 0 || classOf(after, "mgmt").Packets == 0 {
				t.Errorf("resp or mgmt traffic not counted: %+v", after.Classes)
			}
			mresp, err := mgmtFromSwitch(st, 1).Do(context.Background(), http.MethodGet, "/metrics", nil)
			if err != nil {
				t.Fatal(err)
			}
			mb, _ := io.ReadAll(mresp.Body)
			mresp.Body.Close()
			for _, series := range []string{`hec_xdp_packets_total{class="udp_get"}`, `hec_xdp_verdicts_total{class="udp_get",verdict="answered"}`,
				`hec_xdp_verdicts_total{class="other",verdict="dropped_acl"}`, `hec_xdp_hot_keys{state="served"} 1`} {
				if !strings.Contains(string(mb), series) {
					t.Errorf("/metrics lacks %s", series)
				}
			}
			if len(after.Talkers) == 0 || after.Talkers[0].Addr != st.Nodes[0].Addr {
				t.Errorf("top talkers %+v, want %s first", after.Talkers, st.Nodes[0].Addr)
			}
			// A write takes the key out before its acknowledgement.
			if err := rc.Set(ctx, "hot", "new", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if v, err := g.get("hot"); err != nil || string(v) != "new" {
				t.Fatalf("get after set: %q, %v", v, err)
			}
			// The allow-list: deny node 1, then take the rule out.
			mc := mgmtFromSwitch(st, 1) // not node 1: the allow-list will deny it, on every service port
			if err := mc.ACLAdd(ctx, api.ACLRule{Prefix: st.Nodes[0].Addr + "/32", Allow: false}); err != nil {
				t.Fatalf("acl add: %v", err)
			}
			g.wait = 300 * time.Millisecond
			if v, err := g.get("hot"); err == nil {
				t.Fatalf("denied source got %q", v)
			}
			if s := xdpStatus(t, st, 1); s.Drops["acl"] == 0 {
				t.Errorf("acl drop not counted: %v", s.Drops)
			}
			if err := mc.ACLDel(ctx, st.Nodes[0].Addr+"/32"); err != nil {
				t.Fatalf("acl del: %v", err)
			}
			g.wait = time.Second
			if v, err := g.get("hot"); err != nil || string(v) != "new" {
				t.Fatalf("get after acl del: %q, %v", v, err)
			}
			// Samples while traffic flows.
			stop := g.getInBackground("hot", 5*time.Millisecond)
			var samples []api.XDPSample
			if err := mc.Samples(ctx, api.SampleQuery{Seconds: 1, Snap: 96}, func(s api.XDPSample) bool {
				samples = append(samples, s)
				return true
			}); err != nil {
				t.Fatal(err)
			}
			stop()
			var gets int
			for _, s := range samples {
				if s.Class == "udp_get" && len(s.Data) > 0 && len(s.Data) <= 96 {
					gets++
				}
			}
			if gets == 0 {
				t.Fatalf("no udp_get samples among %d", len(samples))
			}
			if mode == "native" {
				t.Run("inspect pcap", func(t *testing.T) { inspectPcap(t, st, g) })
			}
		})
	}
}

// inspectPcap runs hecctl inspect --pcap during traffic as a user would,
// then reads the file with tshark.
func inspectPcap(t *testing.T, st *cluster.State, g *udpGetter) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("no tshark: make test-deps installs it as root")
	}
	bin := testutil.Hecctl(t)
	stop := g.getInBackground("hot", 2*time.Millisecond)
	pcap := filepath.Join(t.TempDir(), "x.pcap")
	inspect := exec.Command("ip", "netns", "exec", st.Switch, bin, "inspect", "--mgmt", st.Nodes[1].Mgmt(),
		"--pcap", pcap, "--seconds", "1", "--snap", "128")
	inspect.Env = append(os.Environ(), "HEC_TOKEN_FILE="+st.Token) // the cluster's state is in the test's own directory
	out, err := inspect.CombinedOutput()
	stop()
	if err != nil {
		t.Fatalf("hecctl inspect --pcap: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	tsh, err := exec.Command(tshark, "-r", pcap, "-T", "fields", "-e", "ip.src", "-e", "udp.dstport", "-e", "data.data").Output()
	if err != nil {
		t.Fatalf("tshark -r: %v", err)
	}
	var gets int
	for _, l := range strings.Split(string(tsh), "\n") {
		f := strings.Fields(l)
		// "get hot\r\n" after the 8-byte frame header.
		if len(f) == 3 && f[0] == st.Nodes[0].Addr && f[1] == "11311" && strings.HasSuffix(f[2], "67657420686f740d0a") {
			gets++
		}
	}
	if gets == 0 {
		t.Fatalf("tshark shows no GET from %s:\n%.2000s", st.Nodes[0].Addr, tsh)
	}
	t.Logf("tshark read %d GETs from %s", gets, st.Nodes[0].Addr)
}

// TestHotGETConsistency runs SETs (over RESP) and UDP GETs together with
// the hot-GET cache on, and checks every GET against the acknowledged
// history: a GET sent after a SET was acknowledged never returns an older
// value.
func TestHotGETConsistency(t *testing.T) {
	for _, dur := range []string{"async", "sync"} {
		t.Run(dur, func(t *testing.T) {
			st := xdpCluster(t, "xc"+dur[:2], "native", "--durability", dur)
			ctx := context.Background()
			rc := respIn(t, st, 1)
			keys := []string{"c0", "c1", "c2"}
			acked := make([]atomic.Int64, len(keys)) // last acknowledged write per key
			for i, k := range keys {
				if err := rc.Set(ctx, k, "0", 0).Err(); err != nil {
					t.Fatal(err)
				}
				acked[i].Store(0)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var writes atomic.Int64
			for i := range keys {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					for n := int64(1); ; n++ {
						select {
						case <-stop:
							return
						default:
						}
						if err := rc.Set(ctx, keys[i], strconv.FormatInt(n, 10), 0).Err(); err != nil {
							t.Errorf("set: %v", err)
							return
						}
						acked[i].Store(n)
						writes.Add(1)
						if n%50 == 0 {
							time.Sleep(300 * time.Millisecond) // quiet: the key gets admitted
						}
					}
				}(i)
			}
			var reads, stale, lost atomic.Int64
			for r := 0; r < 4; r++ {
				wg.Add(1)
				go func(r int) {
					defer wg.Done()
					g := newUDPGetter(t, st.Nodes[0].NS, st.Nodes[1].Addr+":11311")
					for j := 0; ; j++ {
						select {
						case <-stop:
							return
						default:
						}
						i := (r + j) % len(keys)
						low := acked[i].Load()
						v, err := g.get(keys[i])
						if err != nil {
							lost.Add(1)
							continue
						}
						n, err := strconv.ParseInt(string(v), 10, 64)
						if err != nil {
							t.Errorf("value %q", v)
							return
						}
						reads.Add(1)
						if n < low {
							stale.Add(1)
							t.Errorf("key %s: read %d after %d was acknowledged", keys[i], n, low)
						}
					}
				}(r)
			}
			time.Sleep(4 * time.Second)
			close(stop)
			wg.Wait()
			s := xdpStatus(t, st, 1)
			u := classOf(s, "udp_get")
			t.Logf("%d writes, %d reads (%d answered in XDP, %d passed up; %d torn reads passed up), %d stale, %d unanswered; %d invalidations",
				writes.Load(), reads.Load(), u.Answered, u.Passed, u.HotTorn, stale.Load(), lost.Load(), s.Hot.Invalidations)
			if u.Answered < 100 || u.Passed < 100 {
				t.Errorf("want both paths exercised: %d answered in XDP, %d passed up", u.Answered, u.Passed)
			}
			if lost.Load() > reads.Load()/100 {
				t.Errorf("%d GETs unanswered", lost.Load())
			}
		})
	}
}
