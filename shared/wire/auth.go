package wire

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// The TCP handoff's authentication, when the agent has an operator token.
// Before any frame, each side proves it knows the token without sending
// it, over fresh nonces (so a recorded exchange cannot be replayed):
//
//	agent → host: AuthMagic (8) | agent nonce (32)
//	host → agent: host nonce (32) | HMAC-SHA256(token, "hec-tcp v1 host"  | agent nonce | host nonce)
//	agent → host: HMAC-SHA256(token, "hec-tcp v1 agent" | agent nonce | host nonce)
//
// An agent that finds the host's MAC wrong closes the connection without
// answering; a host that finds the agent's MAC wrong does too. Frames
// follow as without authentication. (The frames themselves are not
// encrypted or MACed: the handshake keeps out whoever lacks the token, not
// an attacker on the path.) Neither side reads past the handshake's bytes.

// AuthMagic opens an agent's challenge. Read as a frame header it is no
// frame (its first bytes are not a descriptor an agent sends first), so a
// host without a token can say that the agent wants one.
var AuthMagic = [8]byte{'H', 'E', 'C', 'A', 'U', 'T', 'H', '1'}

const authNonce = 32

// AuthChallengeSize and AuthResponseSize are the handshake's messages.
const (
	AuthChallengeSize = len(AuthMagic) + authNonce
	AuthResponseSize  = authNonce + sha256.Size
)

// NewToken returns a fresh operator's token: 32 random bytes as hex (the
// agent makes one when its token file is missing; harnesses make theirs).
func NewToken() (string, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(raw[:]), nil
}

// ErrAuth is a failed handshake: the other side does not know the token.
var ErrAuth = errors.New("wire: authentication failed")

func authMAC(token []byte, label string, agentNonce, hostNonce []byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte("hec-tcp v1 " + label))
	m.Write(agentNonce)
	m.Write(hostNonce)
	return m.Sum(nil)
}

// AuthAgent runs the agent's side of the handshake on rw (set a deadline
// on the connection first).
func AuthAgent(rw io.ReadWriter, token []byte) error {
	var challenge [AuthChallengeSize]byte
	copy(challenge[:], AuthMagic[:])
	agentNonce := challenge[len(AuthMagic):]
	if _, err := rand.Read(agentNonce); err != nil {
		return err
	}
	if _, err := rw.Write(challenge[:]); err != nil {
		return fmt.Errorf("wire: send challenge: %w", err)
	}
	var resp [AuthResponseSize]byte
	if _, err := io.ReadFull(rw, resp[:]); err != nil {
		return fmt.Errorf("wire: read the host's answer: %w", err)
	}
	hostNonce := resp[:authNonce]
	if !hmac.Equal(resp[authNonce:], authMAC(token, "host", agentNonce, hostNonce)) {
		return fmt.Errorf("%w: the host's answer does not prove the token", ErrAuth)
	}
	if _, err := rw.Write(authMAC(token, "agent", agentNonce, hostNonce)); err != nil {
		return fmt.Errorf("wire: send proof: %w", err)
	}
	return nil
}

// AuthHost runs the host's side of the handshake on rw (set a deadline on
// the connection first).
func AuthHost(rw io.ReadWriter, token []byte) error {
	var challenge [AuthChallengeSize]byte
	if _, err := io.ReadFull(rw, challenge[:]); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("%w: no challenge from the agent in time: an agent without a token asks for none (then give none): %v", ErrAuth, err)
		}
		return fmt.Errorf("wire: read the agent's challenge: %w", err)
	}
	if !bytes.Equal(challenge[:len(AuthMagic)], AuthMagic[:]) {
		return fmt.Errorf("%w: the agent sent no challenge (does it have a token?)", ErrAuth)
	}
	agentNonce := challenge[len(AuthMagic):]
	var resp [AuthResponseSize]byte
	hostNonce := resp[:authNonce]
	if _, err := rand.Read(hostNonce); err != nil {
		return err
	}
	copy(resp[authNonce:], authMAC(token, "host", agentNonce, hostNonce))
	if _, err := rw.Write(resp[:]); err != nil {
		return fmt.Errorf("wire: send answer: %w", err)
	}
	var proof [sha256.Size]byte
	if _, err := io.ReadFull(rw, proof[:]); err != nil {
		return fmt.Errorf("%w: the agent closed the connection (wrong token?): %v", ErrAuth, err)
	}
	if !hmac.Equal(proof[:], authMAC(token, "agent", agentNonce, hostNonce)) {
		return fmt.Errorf("%w: the agent's proof is wrong (it does not know the token)", ErrAuth)
	}
	return nil
}
