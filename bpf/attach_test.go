//go:build linux

package bpf

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// inFreshNetns runs f on a thread moved into a network namespace of its
// own with a veth pair (va, vb) up; the namespace, and everything in it,
// goes with the thread when f returns.
func inFreshNetns(t *testing.T, f func() error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces and XDP need root")
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("unshare: %w", err)
			return
		}
		va := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "va", NumTxQueues: 1, NumRxQueues: 1}, PeerName: "vb"}
		if err := netlink.LinkAdd(va); err != nil {
			done <- fmt.Errorf("veth: %w", err)
			return
		}
		for _, n := range []string{"va", "vb"} {
			l, err := netlink.LinkByName(n)
			if err == nil {
				err = netlink.LinkSetUp(l)
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- f()
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestAttachRefusesForeignProgram: a program hec did not attach stays
// unless replace is given; native and generic both attach on a veth.
func TestAttachRefusesForeignProgram(t *testing.T) {
	p := load(t, Config{})
	inFreshNetns(t, func() error {
		for _, m := range []Mode{ModeNative, ModeGeneric, ModeAuto} {
			got, err := p.Attach("va", m, false)
			if err != nil {
				return fmt.Errorf("attach %s: %w", m, err)
			}
			if m != ModeAuto && got != m {
				return fmt.Errorf("attached %s, asked %s", got, m)
			}
			if err := p.Detach(); err != nil {
				return err
			}
		}
		if err := AttachPass("va"); err != nil { // someone else's program
			return err
		}
		if _, err := p.Attach("va", ModeAuto, false); !errors.Is(err, ErrForeignProgram) {
			return fmt.Errorf("attach over a foreign program: %v, want ErrForeignProgram", err)
		}
		if _, err := p.Attach("va", ModeNative, true); err != nil {
			return fmt.Errorf("replace: %w", err)
		}
		l, err := netlink.LinkByName("va")
		if err != nil {
			return err
		}
		info, err := p.Program().Info()
		if err != nil {
			return err
		}
		id, _ := info.ID()
		if x := l.Attrs().Xdp; x == nil || !x.Attached || x.ProgId != uint32(id) {
			return fmt.Errorf("after replace, va runs %+v, want program %d", l.Attrs().Xdp, id)
		}
		if _, err := p.Attach("nosuch0", ModeAuto, false); err == nil {
			return errors.New("attach to a missing interface succeeded")
		}
		return p.Detach()
	})
}

// TestPinsOutliveTheProgram: counters and the allow-list pinned under
// PinDir carry over to the next Load; the hot map does not.
func TestPinsOutliveTheProgram(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("pinning needs root")
	}
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("hec-test-%d", os.Getpid()))
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := Config{Ports: testPorts, PinDir: dir, HotGET: true}
	p, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pkt := frame{tcp: true, sport: 40000, dport: 6380}.bytes(t)
	for range 3 {
		if _, _, err := p.Run(pkt); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.ACLAdd(ACLRule{Prefix: netip.MustParsePrefix("10.9.0.0/16")}); err != nil {
		t.Fatal(err)
	}
	admit(t, p, "k", "v", 1, time.Time{})
	p.Close()

	q, err := Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if s := statsOf(t, q)[ClassRESP]; s.Packets != 3 {
		t.Errorf("after a reload, resp counted %d packets, want 3", s.Packets)
	}
	if rules, _ := q.ACLList(); len(rules) != 1 {
		t.Errorf("after a reload, allow-list %v", rules)
	}
	if top, _ := q.Talkers(1); len(top) != 1 || top[0].Packets != 3 {
		t.Errorf("after a reload, talkers %+v", top)
	}
	if q.Hot().Len() != 0 {
		t.Errorf("the hot map outlived its agent")
	}
	get := frame{sport: 40000, dport: 11311, payload: getReq(1, "get k\r\n")}.bytes(t)
	if act, _, _ := q.Run(get); act != XDPPass {
		t.Errorf("a key held by the previous program is answered: %d", act)
	}
}
