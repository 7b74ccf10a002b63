package accept

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hecsys/hec/shared/panics"
)

// Back-off between retries of a failed accept, and how many errors in a
// row that are neither about resources nor one connection end the loop.
const (
	minBackoff    = 5 * time.Millisecond
	maxBackoff    = time.Second
	maxHardErrors = 10
)

// Loop accepts connections on one listener.
type Loop struct {
	name   string
	ln     net.Listener
	handle func(net.Conn)
	log    *slog.Logger

	retries atomic.Uint64
	active  atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// New returns a loop that serves ln with handle, one goroutine per
// connection; name labels its log lines. The connection is closed when
// handle returns. log may be nil.
func New(name string, ln net.Listener, handle func(net.Conn), log *slog.Logger) *Loop {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Loop{name: name, ln: ln, handle: handle, log: log, conns: map[net.Conn]struct{}{}}
}

// Addr is the listener's address.
func (l *Loop) Addr() net.Addr { return l.ln.Addr() }

// Retries is the number of accept errors retried so far.
func (l *Loop) Retries() uint64 { return l.retries.Load() }

// Conns is the number of connections being served.
func (l *Loop) Conns() int { return int(l.active.Load()) }

// Run accepts until Close (it then returns nil) or until the listener has
// failed for good (it returns why). Handlers may still run when it
// returns; Close waits for them.
func (l *Loop) Run() error {
	backoff := time.Duration(0)
	failing, hard := uint64(0), 0
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if l.isClosed() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			l.retries.Add(1)
			if failing++; failing == 1 {
				l.log.Warn(l.name+": accept failed; retrying with back-off", "err", err)
			}
			if !transient(err) {
				if hard++; hard >= maxHardErrors {
					return fmt.Errorf("%s: accept failed %d times in a row: %w", l.name, hard, err)
				}
			}
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			time.Sleep(backoff)
			continue
		}
		if failing > 0 {
			l.log.Info(l.name+": accepting again", "errors", failing)
		}
		backoff, failing, hard = 0, 0, 0
		if !l.track(c) {
			c.Close()
			return nil
		}
		go func() {
			defer l.untrack(c)
			// A panic while serving one connection closes it alone.
			defer func() { panics.Recovered(l.log, "conn/"+l.name, recover()) }() //nolint:errcheck // the connection closes
			l.handle(c)
		}()
	}
}

// transient reports whether an accept error is about resources (EMFILE,
// ENFILE, ENOBUFS, ENOMEM) or one connection (aborted, reset, refused by a
// filter): the listener itself is fine.
func transient(err error) bool {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return false
	}
	switch errno {
	case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.ECONNRESET,
		syscall.EINTR, syscall.EAGAIN, syscall.EPROTO, syscall.EPERM, syscall.ETIMEDOUT:
		return true
	}
	return false
}

func (l *Loop) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

func (l *Loop) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conns[c] = struct{}{}
	l.active.Add(1)
	l.wg.Add(1)
	return true
}

func (l *Loop) untrack(c net.Conn) {
	c.Close()
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	l.active.Add(-1)
	l.wg.Done()
}

// Close closes the listener and every connection being served, and waits
// for their handlers to return.
func (l *Loop) Close() {
	l.mu.Lock()
	l.closed = true
	l.ln.Close()
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}
