package wire

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
)

// pipeRW is one end of a handshake fed from a fixed input.
type pipeRW struct {
	in  io.Reader
	out bytes.Buffer
}

func (p *pipeRW) Read(b []byte) (int, error)  { return p.in.Read(b) }
func (p *pipeRW) Write(b []byte) (int, error) { return p.out.Write(b) }

// TestAuthHandshake: both sides succeed with the same token; with
// different tokens both fail, and the agent sends nothing after its
// challenge.
func TestAuthHandshake(t *testing.T) {
	for _, c := range []struct {
		name        string
		agent, host string
		ok          bool
	}{
		{"same", "0123456789abcdef0123", "0123456789abcdef0123", true},
		{"different", "0123456789abcdef0123", "0123456789abcdef0124", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, h := net.Pipe()
			defer a.Close()
			defer h.Close()
			agentErr := make(chan error, 1)
			go func() {
				err := AuthAgent(a, []byte(c.agent))
				if err != nil {
					a.Close() // as serveTCP does
				}
				agentErr <- err
			}()
			hostErr := AuthHost(h, []byte(c.host))
			aErr := <-agentErr
			if (hostErr == nil) != c.ok || (aErr == nil) != c.ok {
				t.Fatalf("host %v, agent %v", hostErr, aErr)
			}
			if !c.ok && (!errors.Is(hostErr, ErrAuth) || !errors.Is(aErr, ErrAuth)) {
				t.Fatalf("want ErrAuth on both sides: host %v, agent %v", hostErr, aErr)
			}
		})
	}
}

// FuzzAuthAgent: whatever a client sends in place of its answer, the
// agent's side fails (no input proves a token by chance), without a panic,
// having written only its challenge.
func FuzzAuthAgent(f *testing.F) {
	f.Add(make([]byte, AuthResponseSize))
	f.Add(bytes.Repeat([]byte{0xff}, AuthResponseSize+100))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add(AuthMagic[:])
	f.Fuzz(func(t *testing.T, in []byte) {
		p := &pipeRW{in: bytes.NewReader(in)}
		if err := AuthAgent(p, []byte("0123456789abcdef0123")); err == nil {
			t.Fatalf("%x authenticated", in)
		}
		if p.out.Len() != AuthChallengeSize || !bytes.HasPrefix(p.out.Bytes(), AuthMagic[:]) {
			t.Fatalf("the agent wrote %d bytes", p.out.Len())
		}
	})
}

// FuzzAuthHost: whatever an agent (or an impostor) sends, the host's side
// fails without a panic.
func FuzzAuthHost(f *testing.F) {
	f.Add(append(AuthMagic[:], make([]byte, 32+32)...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		p := &pipeRW{in: bytes.NewReader(in)}
		if err := AuthHost(p, []byte("0123456789abcdef0123")); err == nil {
			t.Fatalf("%x authenticated", in)
		}
	})
}
