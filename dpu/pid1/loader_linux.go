package pid1

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hecsys/hec/dpu/slots"
	"github.com/hecsys/hec/shared/bundle"
)

// DefaultGate is how long a new slot has to answer /readyz before the
// loader gives it up.
const DefaultGate = time.Minute

// LoaderOptions configure `hecd supervise`, the loader where the agent
// runs as a service of a DPU's Linux (or a host) rather than as process 1.
type LoaderOptions struct {
	Args      []string // the agent's flags
	StateDir  string   // the agent's --state-dir: the slots live there
	Mgmt      string   // the agent's management API (host:port), for the probes
	TokenFile string   // the agent's --token-file, for the probes
	// TrustedKey, a file with a hex ed25519 public key, is installed as
	// the key bundles must be signed with when the state has none yet.
	TrustedKey string
	Tries      int           // starts of a new slot before falling back (default slots.DefaultTries)
	Gate       time.Duration // how long a new slot has to become ready (default DefaultGate)
	// MgmtCert is the agent's --mgmt-cert: the probes then speak HTTPS
	// to the agent holding exactly that certificate, presenting
	// ProbeCert and ProbeKey (PEM; a client certificate the agent's
	// --mgmt-client-ca signed) when given.
	MgmtCert, ProbeCert, ProbeKey string
}

// Supervise is the loader as a service: it runs the agent from the slot
// the record names (this binary as the base), commits a new slot once it
// is ready and falls back to the committed one when it is not, and stops
// the agent when ctx ends.
func Supervise(ctx context.Context, log *slog.Logger, o LoaderOptions) error {
	st, err := slots.Open(o.StateDir)
	if err != nil {
		return err
	}
	if err := installKey(st, o.TrustedKey); err != nil {
		return err
	}
	if o.Tries <= 0 {
		o.Tries = slots.DefaultTries
	}
	if o.Gate <= 0 {
		o.Gate = DefaultGate
	}
	pc, err := probeClient(o)
	if err != nil {
		return err
	}
	s := &supervisor{log: log, args: o.Args, children: reaper(), tokenFile: o.TokenFile, mgmt: o.Mgmt,
		slots: st, tries: o.Tries, gate: o.Gate, probeClient: pc}
	s.run(ctx)
	return nil
}

// probeClient is the HTTPS client of the probes when the agent serves
// TLS (nil when it does not). The agent's certificate is pinned: the
// loader accepts the one it configured the agent with and no other, on
// whatever address (its names need not cover loopback).
func probeClient(o LoaderOptions) (*http.Client, error) {
	if o.MgmtCert == "" {
		if o.ProbeCert != "" {
			return nil, errors.New("--probe-cert: the agent serves its management API without TLS (no --mgmt-cert)")
		}
		return nil, nil
	}
	b, err := os.ReadFile(o.MgmtCert)
	if err != nil {
		return nil, fmt.Errorf("agent flags: --mgmt-cert: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("agent flags: --mgmt-cert %s: no PEM certificate first in it", o.MgmtCert)
	}
	leaf := block.Bytes
	tc := &tls.Config{
		InsecureSkipVerify: true, // verified below: pinned to the agent's own certificate
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], leaf) {
				return fmt.Errorf("the management API's certificate is not the agent's (%s)", o.MgmtCert)
			}
			return nil
		},
	}
	if (o.ProbeCert == "") != (o.ProbeKey == "") {
		return nil, errors.New("--probe-cert and --probe-key go together")
	}
	if o.ProbeCert != "" {
		cert, err := tls.LoadX509KeyPair(o.ProbeCert, o.ProbeKey)
		if err != nil {
			return nil, fmt.Errorf("--probe-cert %s, --probe-key %s: %w", o.ProbeCert, o.ProbeKey, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}, nil
}

// installKey makes the key in path the trusted one when none is.
func installKey(st *slots.Store, path string) error {
	if _, err := st.TrustedKey(); !errors.Is(err, slots.ErrNoKey) || path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--trusted-key: %w", err)
	}
	k, err := bundle.ParsePublicKey(b)
	if err != nil {
		return fmt.Errorf("--trusted-key %s: %w", path, err)
	}
	return st.SetTrustedKey(k)
}

// self is this binary: the base slot.
func self() string {
	exe, err := os.Executable()
	if err != nil {
		return "/init"
	}
	return exe
}

// choose returns the binary to start and its slot: the record's active
// slot with the try counted, after giving up a slot on trial that has
// used its tries, and any slot whose bundle does not verify. The manifest
// it verified is kept for the commit (s.manifest).
func (s *supervisor) choose() (exe, slot string) {
	s.manifest = bundle.Manifest{}
	if s.slots == nil {
		return self(), slots.Base
	}
	rec, err := s.slots.Read()
	if err != nil {
		s.log.Error("slots: running the base agent", "err", err)
		return self(), slots.Base
	}
	now := time.Now()
	if s.gaveUp != "" {
		for _, g := range strings.Split(s.gaveUp, ",") {
			slot, why, _ := strings.Cut(g, ":")
			s.log.Error("the boot ROM gave a machine slot up", "slot", slot, "why", why)
			rec.GiveUpBoot(slot, why, s.tries, now)
		}
		s.gaveUp = "" // said once, at boot
	}
	if s.boots && bundle.IsMachine(rec.Targets[rec.Active]) && rec.Active != s.booted {
		// A machine slot is run by booting it: the boot ROM boots what
		// the record names (its try is counted once it runs).
		return s.rebootInto(rec)
	}
	trying := rec.Active
	if _, rolledBack := rec.Start(s.tries, s.lastExit, now); rolledBack {
		s.log.Error("new slot failed its tries: rolled back", "slot", slots.Name(trying), "tries", s.tries, "last", s.lastExit)
	}
	for rec.Active != slots.Base {
		if m, err := s.slots.Verify(rec.Active); err == nil {
			s.manifest = m
			break
		} else if rec.Active != rec.Committed {
			s.log.Error("new slot does not verify: rolling back", "slot", slots.Name(rec.Active), "err", err)
			rec.RollBack("does not verify: "+err.Error(), now)
		} else {
			s.log.Error("committed slot does not verify: running the base agent", "slot", slots.Name(rec.Active), "err", err)
			rec.Active, rec.Committed, rec.Tries = slots.Base, slots.Base, 0
		}
	}
	if s.boots {
		// After a rollback the committed machine may be another kernel
		// than the one running.
		if want := bundle.BootSlot(rec.Active, rec.Machine, rec.Targets); want != s.booted {
			return s.rebootInto(rec)
		}
	}
	slot = rec.Active
	if err := s.slots.Write(rec); err != nil {
		// Not counting the try risks trying a bad slot for ever: run
		// the committed one instead.
		s.log.Error("slots: cannot count the try: running the committed slot", "err", err)
		slot = rec.Committed
	}
	if slot == slots.Base || bundle.IsMachine(rec.Targets[slot]) {
		return self(), slot // the image's agent, or the machine slot's that booted as this process
	}
	return filepath.Join(s.slots.Dir(slot), bundle.AgentPart), slot
}

// rebootInto writes rec and returns no binary: the machine is to boot
// another slot's kernel and initramfs (bundle.BootSlot of rec), which
// the boot ROM does at the next boot.
func (s *supervisor) rebootInto(rec slots.Record) (exe, slot string) {
	if err := s.slots.Write(rec); err != nil {
		s.log.Error("slots: cannot write the record before rebooting: running the booted agent", "err", err)
		return self(), s.booted
	}
	s.log.Info("rebooting into another machine slot", "boot", slots.Name(bundle.BootSlot(rec.Active, rec.Machine, rec.Targets)),
		"booted", slots.Name(s.booted))
	return "", ""
}

// onTrial says slot is a new slot not yet committed.
func (s *supervisor) onTrial(slot string) bool {
	if s.slots == nil {
		return false
	}
	rec, err := s.slots.Read()
	return err == nil && rec.Active == slot && rec.Committed != slot
}

// commit records that slot passed the health gate, and trusts the key it
// rotates to, if any.
func (s *supervisor) commit(slot string) {
	rec, err := s.slots.Read()
	if err != nil || rec.Active != slot {
		return
	}
	if m := s.manifest; m.NextKey != "" {
		k, err := bundle.ParsePublicKey([]byte(m.NextKey))
		if err == nil {
			err = s.slots.SetTrustedKey(k)
		}
		if err != nil {
			s.log.Error("slot's next key not installed: not committed", "slot", slots.Name(slot), "err", err)
			return
		}
		s.log.Info("trusting the key the committed bundle rotates to", "key", s.manifest.NextKey)
	}
	rec.Commit(time.Now())
	if err := s.slots.Write(rec); err != nil {
		s.log.Error("slots: commit", "err", err)
		return
	}
	s.log.Info("new slot committed", "slot", slots.Name(slot), "version", rec.Versions[slot])
}

// giveUp rolls back from slot on trial.
func (s *supervisor) giveUp(slot, reason string) {
	rec, err := s.slots.Read()
	if err != nil || rec.Active != slot {
		return
	}
	rec.RollBack(reason, time.Now())
	if err := s.slots.Write(rec); err != nil {
		s.log.Error("slots: roll back", "err", err)
	}
}

// switched says the record names another slot than the one that ran.
func (s *supervisor) switched(ran string) bool {
	if s.slots == nil {
		return false
	}
	rec, err := s.slots.Read()
	return err == nil && rec.Active != ran
}
