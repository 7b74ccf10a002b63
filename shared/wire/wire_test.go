package wire

import (
	"bytes"
	"errors"
	"io"
	"math"
	"testing"
)

func TestDescRoundTrip(t *testing.T) {
	d := Desc{Op: OpChecksum, Flags: FlagMore, Status: StatusBusy, NSpan: 3, Tag: 0x0102030405060708,
		Arg0: math.MaxUint64, Arg1: 7, Spans: [MaxSpans]Span{{1, 2}, {3, 4}, {math.MaxUint32, math.MaxUint32}, {0, 0}}}
	var b [DescSize]byte
	d.Marshal(b[:])
	var got Desc
	if err := got.Unmarshal(b[:]); err != nil {
		t.Fatal(err)
	}
	if got != d {
		t.Fatalf("round trip: got %+v want %+v", got, d)
	}
	// Little-endian on the wire, whatever the machine.
	if b[0] != byte(OpChecksum) || b[8] != 0x08 || b[15] != 0x01 {
		t.Fatalf("not little-endian: % x", b[:16])
	}
}

func TestSpanWithin(t *testing.T) {
	tests := []struct {
		name  string
		span  Span
		limit uint64
		ok    bool
	}{
		{"empty at start", Span{0, 0}, 0, true},
		{"empty at end", Span{4096, 0}, 4096, true},
		{"empty past end", Span{4097, 0}, 4096, false},
		{"whole window", Span{0, 4096}, 4096, true},
		{"last byte", Span{4095, 1}, 4096, true},
		{"one past", Span{4095, 2}, 4096, false},
		{"offset wraps 32 bits", Span{math.MaxUint32, 2}, 4096, false},
		{"length wraps 32 bits", Span{2, math.MaxUint32}, 4096, false},
		{"both max in 4 GiB window", Span{math.MaxUint32, math.MaxUint32}, 1 << 32, false},
		{"max end in big window", Span{math.MaxUint32, math.MaxUint32}, 1 << 33, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.span.Within(tt.limit); got != tt.ok {
				t.Fatalf("%+v.Within(%d) = %v, want %v", tt.span, tt.limit, got, tt.ok)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	const win = 1 << 20
	tests := []struct {
		name string
		d    Desc
		want error
	}{
		{"ping", Desc{Op: OpPing}, nil},
		{"one span", Desc{Op: OpChecksum, NSpan: 1, Spans: [4]Span{{0, win}}}, nil},
		{"span past window", Desc{Op: OpChecksum, NSpan: 1, Spans: [4]Span{{1, win}}}, ErrSpan},
		{"unused span ignored", Desc{Op: OpChecksum, NSpan: 1, Spans: [4]Span{{0, 1}, {win, win}}}, nil},
		{"too many spans", Desc{Op: OpChecksum, NSpan: 5}, ErrMalformed},
		{"unknown flag", Desc{Op: OpPing, Flags: 0x8000}, ErrMalformed},
		{"status in request", Desc{Op: OpPing, Status: StatusBusy}, ErrMalformed},
		{"sgl ok", Desc{Op: OpChecksum, Flags: FlagSGL, NSpan: 1, Spans: [4]Span{{0, 64}}}, nil},
		{"sgl ragged", Desc{Op: OpChecksum, Flags: FlagSGL, NSpan: 1, Spans: [4]Span{{0, 63}}}, ErrMalformed},
		{"sgl too long", Desc{Op: OpChecksum, Flags: FlagSGL, NSpan: 1, Spans: [4]Span{{0, (MaxSGL + 1) * SpanSize}}}, ErrMalformed},
		{"sgl two spans", Desc{Op: OpChecksum, Flags: FlagSGL, NSpan: 2}, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.d.Validate(win)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Validate = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestSGL(t *testing.T) {
	spans := []Span{{0, 10}, {10, 20}, {100, 0}}
	b := AppendSGL(nil, spans)
	got, err := DecodeSGL(nil, b, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[1] != spans[1] {
		t.Fatalf("got %v", got)
	}
	if _, err := DecodeSGL(nil, b, 99); !errors.Is(err, ErrSpan) {
		t.Fatalf("want ErrSpan, got %v", err)
	}
	if _, err := DecodeSGL(nil, b[:7], 100); !errors.Is(err, ErrMalformed) {
		t.Fatalf("want ErrMalformed, got %v", err)
	}
	// The spans of a list add up to at most MaxTouch: four windows' worth.
	whole := make([]Span, MaxSpans+1)
	for i := range whole {
		whole[i] = Span{0, 100}
	}
	if _, err := DecodeSGL(nil, AppendSGL(nil, whole[:MaxSpans]), 100); err != nil {
		t.Fatalf("%d spans covering the window: %v", MaxSpans, err)
	}
	if _, err := DecodeSGL(nil, AppendSGL(nil, whole), 100); !errors.Is(err, ErrSpan) {
		t.Fatalf("%d spans covering the window: %v, want ErrSpan", MaxSpans+1, err)
	}
}

func TestStatus(t *testing.T) {
	if StatusOK.Err() != nil || StatusBadSpan.Err() == nil {
		t.Fatal("Err")
	}
	err := error(&OpError{Op: OpChecksum, Status: StatusRestarted})
	if !errors.Is(err, StatusRestarted) || !IsRetryable(err) {
		t.Fatalf("%v: want retryable restarted", err)
	}
	if IsRetryable(&OpError{Op: OpPing, Status: StatusBadSpan}) {
		t.Fatal("bad span must be permanent")
	}
	if IsRetryable(io.EOF) {
		t.Fatal("io.EOF is not a status")
	}
	if got := Status(0x1234).String(); got != "status(0x1234)" {
		t.Fatal(got)
	}
}

func TestFrames(t *testing.T) {
	var buf bytes.Buffer
	d := Desc{Op: OpChecksum, Tag: 9, NSpan: 1, Spans: [4]Span{{0, 11}}}
	if err := WriteFrame(&buf, &d, []byte("hello "), []byte("world")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFrame(&buf, &Desc{Op: OpPing, Tag: 10}); err != nil {
		t.Fatal(err)
	}
	fr := NewFrameReader(&buf, 16)
	got, p, err := fr.Next()
	if err != nil || got != d || string(p) != "hello world" {
		t.Fatalf("frame 1: %+v %q %v", got, p, err)
	}
	if err := got.Validate(uint64(len(p))); err != nil {
		t.Fatal(err)
	}
	got, p, err = fr.Next()
	if err != nil || got.Tag != 10 || len(p) != 0 {
		t.Fatalf("frame 2: %+v %q %v", got, p, err)
	}
	if _, _, err := fr.Next(); err != io.EOF {
		t.Fatalf("want clean EOF, got %v", err)
	}
}

func TestFrameLimits(t *testing.T) {
	var buf bytes.Buffer
	WriteFrame(&buf, &Desc{Op: OpPing}, make([]byte, 17))
	if _, _, err := NewFrameReader(bytes.NewReader(buf.Bytes()), 16).Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("want ErrFrameTooLarge, got %v", err)
	}
	// Truncated payload.
	if _, _, err := NewFrameReader(bytes.NewReader(buf.Bytes()[:70]), 64).Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("want unexpected EOF, got %v", err)
	}
	if _, _, err := NewFrameReader(bytes.NewReader(buf.Bytes()[:80]), 64).Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated payload: want unexpected EOF, got %v", err)
	}
	// A reserve over the limit is refused; within it, it arrives zeroed.
	buf.Reset()
	WriteFrameReserve(&buf, &Desc{Op: OpPing}, 20, []byte("abc"))
	if _, _, err := NewFrameReader(bytes.NewReader(buf.Bytes()), 16).Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("reserve over limit: %v", err)
	}
	if _, p, err := NewFrameReader(bytes.NewReader(buf.Bytes()), 64).Next(); err != nil || len(p) != 23 || string(p[:3]) != "abc" || p[22] != 0 {
		t.Fatalf("reserve: %q %v", p, err)
	}
	// Length below a descriptor.
	if _, _, err := NewFrameReader(bytes.NewReader([]byte{3, 0, 0, 0}), 64).Next(); err == nil {
		t.Fatal("short length accepted")
	}
}

func TestFrameReaderNoAllocSteadyState(t *testing.T) {
	var buf bytes.Buffer
	for i := 0; i < 200; i++ {
		WriteFrame(&buf, &Desc{Op: OpPing, Tag: uint64(i)}, make([]byte, 100))
	}
	r := bytes.NewReader(buf.Bytes())
	fr := NewFrameReader(r, 0)
	fr.Next()
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := fr.Next(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per frame", allocs)
	}
}

func FuzzDescUnmarshal(f *testing.F) {
	var b [DescSize]byte
	(&Desc{Op: OpChecksum, NSpan: 1, Spans: [4]Span{{0, 8}}}).Marshal(b[:])
	f.Add(b[:], uint64(4096))
	f.Add([]byte{1, 2, 3}, uint64(0))
	f.Fuzz(func(t *testing.T, in []byte, limit uint64) {
		var d Desc
		if err := d.Unmarshal(in); err != nil {
			return
		}
		if err := d.Validate(limit); err == nil {
			for _, s := range d.SpanList() {
				if s.End() > limit {
					t.Fatalf("validated span %+v past %d", s, limit)
				}
			}
		}
		var out [DescSize]byte
		d.Marshal(out[:])
		if !bytes.Equal(out[:], in[:DescSize]) {
			t.Fatalf("re-encode differs:\n% x\n% x", out, in[:DescSize])
		}
	})
}

func FuzzDecodeSGL(f *testing.F) {
	f.Add(AppendSGL(nil, []Span{{0, 1}, {5, 5}}), uint64(10))
	f.Fuzz(func(t *testing.T, in []byte, limit uint64) {
		spans, err := DecodeSGL(nil, in, limit)
		if err != nil {
			return
		}
		var total uint64
		for _, s := range spans {
			if s.End() > limit {
				t.Fatalf("span %+v past %d", s, limit)
			}
			total += uint64(s.Len)
		}
		if total > MaxTouch(limit) {
			t.Fatalf("spans name %d bytes, more than %d", total, MaxTouch(limit))
		}
	})
}

func FuzzFrameReader(f *testing.F) {
	var buf bytes.Buffer
	WriteFrame(&buf, &Desc{Op: OpChecksum, NSpan: 1, Spans: [4]Span{{0, 3}}}, []byte("abc"))
	f.Add(buf.Bytes())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		fr := NewFrameReader(bytes.NewReader(in), 1024)
		for i := 0; i < 8; i++ {
			d, p, err := fr.Next()
			if err != nil {
				return
			}
			if len(p) > 1024 {
				t.Fatalf("payload %d over limit", len(p))
			}
			_ = d.Validate(uint64(len(p)))
		}
	})
}
