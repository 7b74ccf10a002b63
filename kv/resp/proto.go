package resp

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// Limits bound what one request may hold.
type Limits struct {
	MaxArgs     int // arguments per command (default 1<<20)
	MaxBulk     int // bytes per argument (default 64 MiB)
	MaxRequest  int // bytes per request, all arguments (default 128 MiB)
	MaxInline   int // bytes of an inline command line (default 64 KiB)
	ReplyBuffer int // reply bytes a client may have unwritten before its requests wait (default 64 KiB)
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
		l.ReplyBuffer = 64 << 10
	}
	return l
}

// ErrProtocol wraps every malformed-request error; the connection is closed
// after replying with it.
var ErrProtocol = errors.New("protocol error")

// Parse parses the first command in buf: RESP multibulk arrays or inline
// lines. It returns the command's arguments, which alias buf (appended to
// args[:0]), and the bytes it used. n is 0 with a nil error when buf does
// not hold a whole command yet: the caller reads more and calls again with
// the same bytes in front. Empty commands (an empty line, *0, *-1) are
// used up and skipped: n > 0 with no arguments says only those were there.
// Every length is checked against lim before anything is trusted, so a
// request that breaks a limit fails as soon as its header says so, without
// waiting for its bytes.
func Parse(buf []byte, lim Limits, args [][]byte) ([][]byte, int, error) {
	var p Parser
	return p.Parse(buf, lim, args)
}

// Parser is Parse that resumes a multibulk request where the last call
// stopped, so a request that arrives in many reads is parsed once, in
// time linear in its size (re-parsing it from the start at every read
// made a 7 MB request cost seconds). Each call must pass the same
// request's bytes from its start, more of them each time; a Parser is
// one connection's. The zero value is ready.
type Parser struct {
	count, done int   // arguments declared; arguments complete
	off, total  int   // bytes of the request parsed; argument bytes so far
	spans       []int // start and end of each complete argument
}

// Parse is the package's Parse, resuming.
func (p *Parser) Parse(buf []byte, lim Limits, args [][]byte) (_ [][]byte, n int, err error) {
	for {
		if len(buf) == n {
			return args[:0], n, nil // nothing, or only empty commands
		}
		var used int
		if buf[n] == '*' {
			args, used, err = p.multibulk(buf[n:], lim, args[:0])
		} else {
			p.reset()
			args, used, err = parseInline(buf[n:], lim, args[:0])
		}
		if err != nil {
			p.reset()
			return args[:0], 0, err
		}
		if used == 0 {
			if n > 0 {
				// Empty commands were skipped in front of this one: the
				// caller passes it from its start next time.
				p.reset()
				return args[:0], n, nil
			}
			return args[:0], 0, nil
		}
		n += used
		if len(args) > 0 {
			return args, n, nil
		}
	}
}

func (p *Parser) reset() {
	p.count, p.done, p.off, p.total = 0, 0, 0, 0
	if cap(p.spans) > 1<<10 {
		p.spans = nil // a huge request's table is not kept
	}
	p.spans = p.spans[:0]
}

// line returns the CRLF-terminated line at the start of b (without CRLF)
// and its length with CRLF; next is 0 when the line is not complete yet.
func line(b []byte, max int) (l []byte, next int, err error) {
	i := bytes.IndexByte(b[:min(len(b), max+2)], '\n')
	if i < 0 {
		if len(b) >= max+2 {
			return nil, 0, fmt.Errorf("%w: line too long", ErrProtocol)
		}
		return nil, 0, nil
	}
	if i < 1 || b[i-1] != '\r' {
		return nil, 0, fmt.Errorf("%w: expected CRLF", ErrProtocol)
	}
	return b[:i-1], i + 1, nil
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

// multibulk parses a *N request from where the last call stopped.
func (p *Parser) multibulk(b []byte, lim Limits, args [][]byte) ([][]byte, int, error) {
	if p.off == 0 {
		l, off, err := line(b, 64)
		if err != nil || off == 0 {
			return args, 0, err
		}
		// As Redis: a count of 0 or less is an empty request, one past
		// the limit a protocol error.
		count, err := strconv.Atoi(string(l[1:]))
		if err != nil || count > lim.MaxArgs {
			return args, 0, fmt.Errorf("%w: invalid multibulk length", ErrProtocol)
		}
		count = max(count, 0)
		p.count, p.done, p.off, p.total = count, 0, off, 0
		p.spans = p.spans[:0]
	}
	for p.done < p.count {
		l, next, err := line(b[p.off:], 64)
		if err != nil || next == 0 {
			return args, 0, err
		}
		if len(l) == 0 || l[0] != '$' {
			return args, 0, fmt.Errorf("%w: expected '$', got '%c'", ErrProtocol, firstByte(l))
		}
		size, err := parseLen(l[1:], lim.MaxBulk)
		if err != nil || size < 0 {
			return args, 0, fmt.Errorf("%w: invalid bulk length", ErrProtocol)
		}
		if p.total+size > lim.MaxRequest {
			return args, 0, fmt.Errorf("%w: request larger than %d bytes", ErrProtocol, lim.MaxRequest)
		}
		start := p.off + next
		if len(b)-start < size+2 {
			return args, 0, nil // the header is checked again next time: cheap
		}
		if b[start+size] != '\r' || b[start+size+1] != '\n' {
			return args, 0, fmt.Errorf("%w: bulk not terminated by CRLF", ErrProtocol)
		}
		p.spans = append(p.spans, start, start+size)
		p.total += size
		p.off = start + size + 2
		p.done++
	}
	for i := 0; i < len(p.spans); i += 2 {
		args = append(args, b[p.spans[i]:p.spans[i+1]:p.spans[i+1]])
	}
	used := p.off
	p.reset()
	return args, used, nil
}

func firstByte(b []byte) byte {
	if len(b) == 0 {
		return ' '
	}
	return b[0]
}

// parseInline parses a space-separated command line (telnet style).
func parseInline(b []byte, lim Limits, args [][]byte) ([][]byte, int, error) {
	l, next, err := line(b, lim.MaxInline)
	if err != nil || next == 0 {
		return args, 0, err
	}
	for i := 0; i < len(l); {
		for i < len(l) && isInlineSpace(l[i]) {
			i++
		}
		if i == len(l) {
			break
		}
		if len(args) == lim.MaxArgs {
			return args, 0, fmt.Errorf("%w: too many arguments", ErrProtocol)
		}
		j := i
		for j < len(l) && !isInlineSpace(l[j]) && l[j] != '"' && l[j] != '\'' {
			j++
		}
		if j == len(l) || isInlineSpace(l[j]) { // no quotes: a slice of the line
			args = append(args, l[i:j:j])
			i = j
			continue
		}
		arg, n, ok := quotedArg(l[i:])
		if !ok {
			return args, 0, fmt.Errorf("%w: unbalanced quotes in request", ErrProtocol)
		}
		args = append(args, arg)
		i += n
	}
	return args, next, nil
}

func isInlineSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// quotedArg reads an inline argument with quotes in it at the start of l,
// as Redis's sdssplitargs: unquoted bytes, then "…" with \xHH, \n, \r,
// \t, \b, \a and \<any> escapes, or '…' with \' alone; a closing quote
// ends the argument and must be followed by a space or the line's end. It
// returns the argument (a copy), the bytes read, and false where the
// quotes do not balance.
func quotedArg(l []byte) ([]byte, int, bool) {
	out := []byte{}
	i := 0
	for i < len(l) && !isInlineSpace(l[i]) {
		q := l[i]
		if q != '"' && q != '\'' {
			out = append(out, q)
			i++
			continue
		}
		for i++; ; i++ {
			if i == len(l) {
				return nil, 0, false
			}
			c := l[i]
			switch {
			case c == q:
				if i+1 < len(l) && !isInlineSpace(l[i+1]) {
					return nil, 0, false
				}
				return out, i + 1, true
			case q == '"' && c == '\\' && i+3 < len(l) && l[i+1] == 'x' && isHex(l[i+2]) && isHex(l[i+3]):
				v, _ := strconv.ParseUint(string(l[i+2:i+4]), 16, 8)
				out = append(out, byte(v))
				i += 3
			case q == '"' && c == '\\' && i+1 < len(l):
				i++
				out = append(out, unescape(l[i]))
			case q == '\'' && c == '\\' && i+1 < len(l) && l[i+1] == '\'':
				out = append(out, '\'')
				i++
			default:
				out = append(out, c)
			}
		}
	}
	return out, i, true
}

// unescape is the byte "\c" stands for in double quotes.
func unescape(c byte) byte {
	switch c {
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	case 'b':
		return '\b'
	case 'a':
		return '\a'
	}
	return c
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// Writer appends replies to a buffer; the connection's owner writes it
// out.
type Writer struct {
	buf []byte
}

// Len reports the bytes buffered.
func (w *Writer) Len() int { return len(w.buf) }

func (w *Writer) str(s string) { w.buf = append(w.buf, s...) }

func (w *Writer) Simple(s string) {
	w.buf = append(w.buf, '+')
	w.buf = append(w.buf, s...)
	w.str("\r\n")
}

// maxError bounds an error reply's text: errors echo what clients sent.
const maxError = 500

// Error writes an error reply. Control characters (CR and LF above all)
// become spaces and the text is cut at maxError bytes, so an argument a
// client sent, echoed back, can never end the reply early and forge the
// ones after it (as Redis does).
func (w *Writer) Error(s string) {
	w.buf = append(w.buf, '-')
	if len(s) > maxError {
		s = s[:maxError]
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == 0x7f {
			c = ' '
		}
		w.buf = append(w.buf, c)
	}
	w.str("\r\n")
}

func (w *Writer) prefixed(c byte, n int64) {
	w.buf = append(w.buf, c)
	w.buf = strconv.AppendInt(w.buf, n, 10)
	w.str("\r\n")
}

func (w *Writer) Int(n int64) { w.prefixed(':', n) }
func (w *Writer) Array(n int) { w.prefixed('*', int64(n)) }
func (w *Writer) NullBulk()   { w.str("$-1\r\n") }
func (w *Writer) NullArray()  { w.str("*-1\r\n") }
func (w *Writer) OK()         { w.str("+OK\r\n") }
func (w *Writer) BulkString(s string) {
	w.prefixed('$', int64(len(s)))
	w.str(s)
	w.str("\r\n")
}

func (w *Writer) Bulk(b []byte) {
	w.prefixed('$', int64(len(b)))
	w.buf = append(w.buf, b...)
	w.str("\r\n")
}

// BulkOrNull writes b, or the null bulk string when !ok.
func (w *Writer) BulkOrNull(b []byte, ok bool) {
	if !ok {
		w.NullBulk()
		return
	}
	w.Bulk(b)
}
