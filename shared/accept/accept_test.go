package accept

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// flaky is a listener whose Accept fails with errs first, then passes to a
// real one.
type flaky struct {
	net.Listener
	mu   sync.Mutex
	errs []error
}

func (f *flaky) Accept() (net.Conn, error) {
	f.mu.Lock()
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		f.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: err}
	}
	f.mu.Unlock()
	return f.Listener.Accept()
}

func listen(t *testing.T, errs ...error) *flaky {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return &flaky{Listener: ln, errs: errs}
}

func echo(c net.Conn) {
	b := make([]byte, 1)
	for {
		if _, err := c.Read(b); err != nil {
			return
		}
		c.Write(b)
	}
}

func roundTrip(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	b := []byte{'x'}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(b); err != nil {
		t.Fatalf("no echo: %v", err)
	}
}

func TestRetriesThenServes(t *testing.T) {
	cases := []struct {
		name string
		errs []error
	}{
		{"emfile storm", []error{syscall.EMFILE, syscall.EMFILE, syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED}},
		{"a few odd errors", []error{syscall.EINVAL, syscall.EINVAL}},
		{"none", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ln := listen(t, tc.errs...)
			l := New("test", ln, echo, nil)
			done := make(chan error, 1)
			go func() { done <- l.Run() }()
			roundTrip(t, ln.Addr().String())
			if got := l.Retries(); got != uint64(len(tc.errs)) {
				t.Errorf("retries %d, want %d", got, len(tc.errs))
			}
			l.Close()
			if err := <-done; err != nil {
				t.Errorf("Run after Close: %v", err)
			}
		})
	}
}

func TestStopsForGoodOnRepeatedHardErrors(t *testing.T) {
	errs := make([]error, maxHardErrors)
	for i := range errs {
		errs[i] = syscall.EINVAL
	}
	ln := listen(t, errs...)
	defer ln.Close()
	l := New("test", ln, echo, nil)
	err := l.Run()
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Run: %v, want the listener's error", err)
	}
}

func TestCloseEndsConnectionsAndWaits(t *testing.T) {
	ln := listen(t)
	var ended atomic.Bool
	l := New("test", ln, func(c net.Conn) { echo(c); ended.Store(true) }, nil)
	go l.Run()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for deadline := time.Now().Add(5 * time.Second); l.Conns() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("connection never tracked")
		}
	}
	l.Close() // returns only once the handler has
	if !ended.Load() {
		t.Fatal("Close returned before the handler")
	}
	if l.Conns() != 0 {
		t.Fatalf("%d connections after Close", l.Conns())
	}
}

// TestPanicClosesOneConnection: a handler that panics on one connection
// closes that connection; the loop and the other connections go on.
func TestPanicClosesOneConnection(t *testing.T) {
	ln := listen(t)
	l := New("test", ln, func(c net.Conn) {
		b := make([]byte, 1)
		for {
			if _, err := c.Read(b); err != nil {
				return
			}
			if b[0] == '!' {
				panic("a bug")
			}
			c.Write(b)
		}
	}, nil)
	go l.Run()
	defer l.Close()
	bad, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	bad.SetDeadline(time.Now().Add(5 * time.Second))
	bad.Write([]byte{'!'})
	if _, err := bad.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection whose handler panicked is still open")
	}
	roundTrip(t, ln.Addr().String())
}
