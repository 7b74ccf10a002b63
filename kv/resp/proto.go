package resp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Limits bound what one request may hold.
type Limits struct {
	MaxArgs     int // arguments per command (default 1<<20)
	MaxBulk     int // bytes per argument (default 64 MiB)
	MaxRequest  int // bytes per request, all arguments (default 128 MiB)
	MaxInline   int // bytes of an inline command line (default 64 KiB)
	ReplyBuffer int // bytes buffered per client before a blocking flush (default 16 KiB)
}

func (l Limits) withDefaults() Limits {
	if l.MaxArgs <= 0 {
		l.MaxArgs = 1 << 20
	}
	if l.MaxBulk <= 0 {
		l.MaxBulk = 64 << 20
	}
	if l.MaxRequest <= 0 {
		l.MaxRequest = 128 << 20
	}
	if l.MaxInline <= 0 {
		l.MaxInline = 64 << 10
	}
	if l.ReplyBuffer <= 0 {
		l.ReplyBuffer = 16 << 10
	}
	return l
}

// ErrProtocol wraps every malformed-request error; the connection is closed
// after replying with it.
var ErrProtocol = errors.New("protocol error")

// Reader reads commands: RESP multibulk arrays or inline lines.
type Reader struct {
	r     *bufio.Reader
	lim   Limits
	args  [][]byte
	buf   []byte
	spans []span
}

type span struct{ off, n int }

// NewReader returns a Reader over r with limits lim.
func NewReader(r io.Reader, lim Limits) *Reader {
	lim = lim.withDefaults()
	return &Reader{r: bufio.NewReaderSize(r, 16<<10), lim: lim}
}

// Buffered reports bytes already read from the connection and not yet
// parsed (a pipelined request follows).
func (r *Reader) Buffered() int { return r.r.Buffered() }

// line reads one CRLF-terminated line (without it), at most max bytes.
func (r *Reader) line(max int) ([]byte, error) {
	l, err := r.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) || len(l) > max+2 {
		return nil, fmt.Errorf("%w: line too long", ErrProtocol)
	}
	if err != nil {
		if len(l) > 0 && errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if len(l) < 2 || l[len(l)-2] != '\r' {
		return nil, fmt.Errorf("%w: expected CRLF", ErrProtocol)
	}
	return l[:len(l)-2], nil
}

func parseLen(b []byte, max int) (int, error) {
	if len(b) == 0 || len(b) > 11 {
		return 0, fmt.Errorf("%w: invalid length", ErrProtocol)
	}
	n, err := strconv.Atoi(string(b))
	if err != nil || n < -1 || n > max {
		return 0, fmt.Errorf("%w: invalid length %q", ErrProtocol, b)
	}
	return n, nil
}

// ReadCommand returns the next command's arguments. They alias the
// reader's buffer and are valid until the next call.
func (r *Reader) ReadCommand() ([][]byte, error) {
	for {
		first, err := r.r.Peek(1)
		if err != nil {
			return nil, err
		}
		if first[0] != '*' {
			args, err := r.inline()
			if err != nil || len(args) > 0 {
				return args, err
			}
			continue // empty line
		}
		l, err := r.line(64)
		if err != nil {
			return nil, err
		}
		n, err := parseLen(l[1:], r.lim.MaxArgs)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			continue // *0 or *-1: nothing to do
		}
		r.args = r.args[:0]
		r.buf = r.buf[:0]
		spans := r.spans[:0]
		total := 0
		for i := 0; i < n; i++ {
			l, err := r.line(64)
			if err != nil {
				return nil, err
			}
			if len(l) == 0 || l[0] != '$' {
				return nil, fmt.Errorf("%w: expected '$', got '%c'", ErrProtocol, firstByte(l))
			}
			size, err := parseLen(l[1:], r.lim.MaxBulk)
			if err != nil || size < 0 {
				return nil, fmt.Errorf("%w: invalid bulk length", ErrProtocol)
			}
			if total += size; total > r.lim.MaxRequest {
				return nil, fmt.Errorf("%w: request larger than %d bytes", ErrProtocol, r.lim.MaxRequest)
			}
			off := len(r.buf)
			r.buf = append(r.buf, make([]byte, size+2)...)
			if _, err := io.ReadFull(r.r, r.buf[off:]); err != nil {
				return nil, noEOF(err)
			}
			if r.buf[off+size] != '\r' || r.buf[off+size+1] != '\n' {
				return nil, fmt.Errorf("%w: bulk not terminated by CRLF", ErrProtocol)
			}
			r.buf = r.buf[:off+size]
			spans = append(spans, span{off, size})
		}
		for _, s := range spans {
			r.args = append(r.args, r.buf[s.off:s.off+s.n:s.off+s.n])
		}
		if cap(spans) <= 1024 { // keep a small table only
			r.spans = spans
		}
		return r.args, nil
	}
}

func firstByte(b []byte) byte {
	if len(b) == 0 {
		return ' '
	}
	return b[0]
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// inline parses a space-separated command line (telnet style).
func (r *Reader) inline() ([][]byte, error) {
	l, err := r.line(r.lim.MaxInline)
	if err != nil {
		return nil, err
	}
	r.args = r.args[:0]
	r.buf = append(r.buf[:0], l...)
	b := r.buf
	for i := 0; i < len(b); {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
			i++
		}
		j := i
		for j < len(b) && b[j] != ' ' && b[j] != '\t' {
			j++
		}
		if j > i {
			if len(r.args) == r.lim.MaxArgs {
				return nil, fmt.Errorf("%w: too many arguments", ErrProtocol)
			}
			r.args = append(r.args, b[i:j:j])
		}
		i = j
	}
	return r.args, nil
}

// Writer buffers replies.
type Writer struct {
	w   *bufio.Writer
	num []byte
}

// NewWriter returns a Writer with a buffer of size bytes.
func NewWriter(w io.Writer, size int) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, size)}
}

func (w *Writer) Flush() error { return w.w.Flush() }

func (w *Writer) Simple(s string) {
	w.w.WriteByte('+')
	w.w.WriteString(s)
	w.w.WriteString("\r\n")
}

func (w *Writer) Error(s string) {
	w.w.WriteByte('-')
	w.w.WriteString(s)
	w.w.WriteString("\r\n")
}

func (w *Writer) prefixed(c byte, n int64) {
	w.w.WriteByte(c)
	w.num = strconv.AppendInt(w.num[:0], n, 10)
	w.w.Write(w.num)
	w.w.WriteString("\r\n")
}

func (w *Writer) Int(n int64) { w.prefixed(':', n) }
func (w *Writer) Array(n int) { w.prefixed('*', int64(n)) }
func (w *Writer) NullBulk()   { w.w.WriteString("$-1\r\n") }
func (w *Writer) NullArray()  { w.w.WriteString("*-1\r\n") }
func (w *Writer) OK()         { w.w.WriteString("+OK\r\n") }
func (w *Writer) BulkString(s string) {
	w.prefixed('$', int64(len(s)))
	w.w.WriteString(s)
	w.w.WriteString("\r\n")
}

func (w *Writer) Bulk(b []byte) {
	w.prefixed('$', int64(len(b)))
	w.w.Write(b)
	w.w.WriteString("\r\n")
}
