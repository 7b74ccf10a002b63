package kv

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fdatasync syncs f's data (and the metadata needed to read it back).
func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}

// pwriteShort writes b at off in f with pwrite system calls the Go
// scheduler is not told of: a call it is told of wakes the runtime's
// monitor thread, if asleep, for a millisecond of 20 µs ticks, on the
// core the committer shares with the RESP loops. Only for short writes
// into the page cache (wal.writeAt).
func pwriteShort(f *os.File, b []byte, off int64) (int, error) {
	fd, done := f.Fd(), 0
	for done < len(b) {
		n, _, e := unix.RawSyscall6(unix.SYS_PWRITE64, fd, uintptr(unsafe.Pointer(&b[done])), uintptr(len(b)-done),
			uintptr(off+int64(done)), 0, 0)
		switch {
		case e == unix.EINTR:
			continue
		case e != 0:
			return done, &os.PathError{Op: "write", Path: f.Name(), Err: e}
		case n == 0:
			return done, &os.PathError{Op: "write", Path: f.Name(), Err: io.ErrShortWrite}
		}
		done += int(n)
	}
	return done, nil
}

// A logSyncer syncs the log without a blocking system call: the sync
// is a Linux AIO IOCB_CMD_FDSYNC (the kernel runs the same
// vfs_fsync_range in a worker, with the same error reporting), and its
// completion is an eventfd that Go's poller watches, so the committer
// waits parked, like a goroutine reading a socket.
//
// A goroutine in fdatasync holds its thread and the runtime's scheduler
// for the whole sync; the runtime's monitor thread must take the
// scheduler back for the RESP loops, and any system call made while the
// monitor sleeps wakes it to tick every 20 µs for the next millisecond.
// On the one core the bench gives the agent (a DPU has few more), a
// profile of sync SETs (50 clients, -P 1) with fdatasync had 12 % of the
// agent's CPU samples in the monitor's sleeps; a scheduling profile with
// this and the loops waiting in the poller (kv/resp), but the round's
// write and the loops' wake-ups still ordinary system calls, had 42 % of
// the agent's context switches there; with those raw too, 12 %. Old and
// new agent side by side: about a quarter more sync SETs per second.
//
// Where the kernel refuses AIO fsync (before 4.18, or no AIO context to
// be had) it falls back to fdatasync for good.
type logSyncer struct {
	mu       sync.Mutex // one sync at a time
	ctx      uintptr    // aio_context_t; 0: fall back to fdatasync
	done     *os.File   // the eventfd completions count on
	doneC    syscall.RawConn
	readDone func(uintptr) bool // s.takeDone, made once: a wait allocates nothing
	doneErr  error              // what takeDone read
	cb       iocb
	ev       ioEvent
	aio      atomic.Bool // ctx != 0, for kind
}

// iocb is Linux's struct iocb (linux/aio_abi.h), the same on every
// little-endian 64-bit architecture Go builds hecd for.
type iocb struct {
	data     uint64
	key      uint32
	rwFlags  int32
	opcode   uint16
	reqprio  int16
	fildes   uint32
	buf      uint64
	nbytes   uint64
	offset   int64
	reserved uint64
	flags    uint32
	resfd    uint32
}

// ioEvent is Linux's struct io_event.
type ioEvent struct {
	data, obj uint64
	res, res2 int64
}

const (
	iocbCmdFdsync = 3
	iocbFlagResfd = 1 << 0
)

// newLogSyncer sets up an AIO context and its eventfd, or returns a
// syncer that calls fdatasync where the kernel offers neither.
func newLogSyncer() *logSyncer {
	s := &logSyncer{}
	var ctx uintptr
	if _, _, e := unix.RawSyscall(unix.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		return s
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.RawSyscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
		return s
	}
	f := os.NewFile(uintptr(efd), "aio-done")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		unix.RawSyscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
		return s
	}
	s.ctx, s.done, s.doneC = ctx, f, rc
	s.readDone = s.takeDone
	s.aio.Store(true)
	return s
}

// sync is fdatasync(f), waited for in Go's poller where it can be.
func (s *logSyncer) sync(f *os.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx == 0 {
		return fdatasync(f)
	}
	s.cb = iocb{opcode: iocbCmdFdsync, fildes: uint32(f.Fd()), flags: iocbFlagResfd, resfd: uint32(s.done.Fd())}
	cbs := [1]*iocb{&s.cb}
	for {
		_, _, e := unix.RawSyscall(unix.SYS_IO_SUBMIT, s.ctx, 1, uintptr(unsafe.Pointer(&cbs[0])))
		switch e {
		case 0:
			return s.wait()
		case unix.EINTR:
			continue
		case unix.EAGAIN: // no room in the context: cannot be, with one sync at a time
			return fdatasync(f)
		case unix.EINVAL, unix.ENOSYS, unix.EOPNOTSUPP:
			// This kernel or file system cannot sync through AIO (EINVAL
			// before 4.18): sync as before, from now on.
			s.closeLocked()
			return fdatasync(f)
		default:
			return e // a bad descriptor, say: what fdatasync would say
		}
	}
}

// wait waits for the submitted sync's completion and returns its result.
func (s *logSyncer) wait() error {
	for {
		s.doneErr = nil
		err := s.doneC.Read(s.readDone)
		if err == nil {
			err = s.doneErr
		}
		if err != nil {
			break // the eventfd failed: wait in the kernel instead (below)
		}
		var zero unix.Timespec
		n, _, e := unix.RawSyscall6(unix.SYS_IO_GETEVENTS, s.ctx, 1, 1, uintptr(unsafe.Pointer(&s.ev)),
			uintptr(unsafe.Pointer(&zero)), 0)
		if e == 0 && n == 1 {
			return s.result()
		}
	}
	for {
		n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, s.ctx, 1, 1, uintptr(unsafe.Pointer(&s.ev)), 0, 0)
		if e == 0 && n == 1 {
			return s.result()
		}
		if e != 0 && e != unix.EINTR {
			return fmt.Errorf("kv: collect the log's sync: %w", e)
		}
	}
}

// takeDone reads the eventfd's count: false while it is zero (the poller
// then waits for it).
func (s *logSyncer) takeDone(fd uintptr) bool {
	var b [8]byte
	_, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), 8)
	switch e {
	case unix.EAGAIN:
		return false
	case 0, unix.EINTR:
	default:
		s.doneErr = e
	}
	return true
}

// result is the error of the sync whose completion s.ev holds.
func (s *logSyncer) result() error {
	if s.ev.obj != uint64(uintptr(unsafe.Pointer(&s.cb))) {
		return fmt.Errorf("kv: the log's sync completed an unknown request (%#x)", s.ev.obj)
	}
	if s.ev.res < 0 {
		return syscall.Errno(-s.ev.res)
	}
	return nil
}

// kind says how sync syncs: "aio" or "fdatasync".
func (s *logSyncer) kind() string {
	if s.aio.Load() {
		return "aio"
	}
	return "fdatasync"
}

// close releases the AIO context: after the last sync.
func (s *logSyncer) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked()
}

func (s *logSyncer) closeLocked() {
	if s.ctx == 0 {
		return
	}
	unix.RawSyscall(unix.SYS_IO_DESTROY, s.ctx, 0, 0)
	s.done.Close()
	s.ctx, s.done, s.doneC = 0, nil, nil
	s.aio.Store(false)
}
