package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hecsys/hec/dpu"
	"github.com/hecsys/hec/host"
)

// The access scenario (issue: who may talk to the agent): the TCP handoff
// of an agent that authenticates each connection against one that does
// not, in the same run — 64 KiB CHECKSUMs one after another, the two
// agents taking turns — and what the handshake adds to a connection.

func benchAccess(ctx context.Context, rep *Report, quick bool) error {
	ops, reps := 30000, 7 // about 1.5 s a run on a 2-core machine
	if quick {
		ops, reps = 5000, 3
	}
	dir, err := os.MkdirTemp("", "hec-bench-access")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tokenFile := filepath.Join(dir, "token")
	start := func(name, tokenFile string) (*dpu.Agent, func(), error) {
		a, err := dpu.New(dpu.Config{Agent: dpu.AgentConfig{Shm: dpu.Off, TCP: "127.0.0.1:0", Mgmt: dpu.Off,
			StateDir: filepath.Join(dir, name), TokenFile: tokenFile},
			RESP: dpu.RESPConfig{Addr: dpu.Off}, UDP: dpu.UDPConfig{Addr: dpu.Off}}, nil)
		if err != nil {
			return nil, nil, err
		}
		actx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(actx) }()
		select {
		case <-a.Ready():
		case err := <-done:
			cancel()
			return nil, nil, err
		}
		return a, func() { cancel(); <-done }, nil
	}
	plain, stopPlain, err := start("plain", "")
	if err != nil {
		return err
	}
	defer stopPlain()
	authed, stopAuthed, err := start("authed", tokenFile)
	if err != nil {
		return err
	}
	defer stopAuthed()
	b, err := os.ReadFile(tokenFile)
	if err != nil {
		return err
	}
	token := strings.TrimSpace(string(b))

	buf := make([]byte, 64<<10)
	rng := rand.New(rand.NewPCG(19, 1))
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	// rate runs ops CHECKSUMs over one connection: ops per second.
	rate := func(target string, opt ...host.Option) (float64, error) {
		c, err := host.Dial(ctx, target, opt...)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		for range ops / 10 { // warm up
			if _, err := c.Checksum(ctx, buf); err != nil {
				return 0, err
			}
		}
		t0 := time.Now()
		for range ops {
			if _, err := c.Checksum(ctx, buf); err != nil {
				return 0, err
			}
		}
		return float64(ops) / time.Since(t0).Seconds(), nil
	}
	// connect is the median time from dial to the first ping answered.
	connect := func(target string, opt ...host.Option) (float64, error) {
		var ts []float64
		for range 51 {
			t0 := time.Now()
			c, err := host.Dial(ctx, target, opt...)
			if err != nil {
				return 0, err
			}
			err = c.Ping(ctx)
			c.Close()
			if err != nil {
				return 0, err
			}
			ts = append(ts, float64(time.Since(t0).Nanoseconds()))
		}
		med, _, _, _ := spread(ts)
		return med, nil
	}
	plainTarget, authedTarget := "tcp://"+plain.Addr("tcp"), "tcp://"+authed.Addr("tcp")
	var plainRates, authRates, ratios []float64
	for r := range reps {
		progress("access", "rep %d of %d: %d × 64 KiB CHECKSUM over TCP, each agent", r+1, reps, ops)
		var p, a float64
		if r%2 == 0 {
			if p, err = rate(plainTarget); err == nil {
				a, err = rate(authedTarget, host.WithToken(token))
			}
		} else {
			if a, err = rate(authedTarget, host.WithToken(token)); err == nil {
				p, err = rate(plainTarget)
			}
		}
		if err != nil {
			return err
		}
		plainRates, authRates, ratios = append(plainRates, p), append(authRates, a), append(ratios, a/p)
	}
	plainConn, err := connect(plainTarget)
	if err != nil {
		return err
	}
	authConn, err := connect(authedTarget, host.WithToken(token))
	if err != nil {
		return err
	}
	if _, err := host.Dial(ctx, authedTarget, host.WithToken(strings.Repeat("0", len(token)))); err == nil {
		return fmt.Errorf("the authenticating agent took a wrong token")
	}

	const s = "access"
	toGBs := func(v []float64) []float64 {
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = x * float64(len(buf)) / 1e9
		}
		return out
	}
	rep.addN(s, "TCP handoff, 64 KiB CHECKSUM, no authentication", toGBs(plainRates), "GB/s")
	rep.addN(s, "TCP handoff, 64 KiB CHECKSUM, authenticated connection", toGBs(authRates), "GB/s")
	rep.add(s, "connect + first PING, no authentication p50", plainConn, "ns")
	rep.add(s, "connect + first PING, with the handshake p50", authConn, "ns")
	rep.atLeastN(s, "authenticated / unauthenticated TCP throughput, 64 KiB ops", ratios, 0.9, "×")
	return nil
}
