package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/shared/rail"
)

// MultiRail splits one allreduce between two rails and runs both at once:
// the host rail (a communicator among the host processes, coll.Open) and
// the DPU rail (the agents, DPUComm). The host rail takes HostShare of the
// elements, the DPU rail the rest; Calibrate sets it from measurements of
// each rail alone so that both finish together. Every rank makes the same
// calls in the same order.
type MultiRail struct {
	Host *coll.Comm
	DPU  *DPUComm

	mu    sync.Mutex
	share float64
	plan  rail.Plan
}

// NewMultiRail returns a split that gives the rails half each until
// Calibrate or SetShare says otherwise.
func NewMultiRail(h *coll.Comm, d *DPUComm) *MultiRail {
	return &MultiRail{Host: h, DPU: d, share: 0.5}
}

// HostShare is the host rail's fraction of every allreduce.
func (m *MultiRail) HostShare() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.share
}

// SetShare sets the host rail's fraction (0: all on the DPU rail, 1: all
// on the host rail). Every rank must set the same.
func (m *MultiRail) SetShare(f float64) {
	m.mu.Lock()
	m.share = min(1, max(0, f))
	m.mu.Unlock()
}

// Calibrate times an allreduce of a few bytes (α) and of size bytes on
// each rail alone — the slowest rank's best of three — and sets the share
// from rank 0's plan (shared/rail: both rails finishing together), which
// every rank takes. It returns the plan.
func (m *MultiRail) Calibrate(ctx context.Context, size int) (rail.Plan, error) {
	size = max(size, 1<<20) &^ 63
	var rails []rail.Rail
	for _, r := range []struct {
		name string
		kind rail.Kind
		run  func(ctx context.Context, send, recv []byte) error
	}{
		{"host", rail.HostCPU, func(ctx context.Context, s, r []byte) error {
			return m.Host.AllReduce(ctx, s, r, coll.Float32, coll.Sum)
		}},
		{"dpu", rail.DPUCores, func(ctx context.Context, s, r []byte) error {
			return m.DPU.AllReduce(ctx, s, r, coll.Float32, coll.Sum)
		}},
	} {
		small, err := m.slowest(ctx, 64, r.run)
		if err != nil {
			return rail.Plan{}, fmt.Errorf("host: calibrating the %s rail: %w", r.name, err)
		}
		large, err := m.slowest(ctx, size, r.run)
		if err != nil {
			return rail.Plan{}, fmt.Errorf("host: calibrating the %s rail: %w", r.name, err)
		}
		rate := float64(size) / max((large-small).Seconds(), 1e-9)
		rails = append(rails, rail.Rail{Name: r.name, Kind: r.kind, Alpha: small, Rate: rate})
	}
	plan := rail.Split(rails, int64(size), 64)
	share := make([]byte, 8)
	if m.Host.Rank() == 0 {
		for _, s := range plan.Shares {
			if s.Rail == "host" {
				binary.LittleEndian.PutUint64(share, math.Float64bits(float64(s.Bytes)/float64(size)))
			}
		}
	}
	if err := m.Host.Broadcast(ctx, share, coll.Float64, 0); err != nil {
		return plan, err
	}
	m.mu.Lock()
	m.share, m.plan = math.Float64frombits(binary.LittleEndian.Uint64(share)), plan
	m.mu.Unlock()
	return plan, nil
}

// slowest is the slowest rank's best time of three runs.
func (m *MultiRail) slowest(ctx context.Context, size int, run func(ctx context.Context, send, recv []byte) error) (time.Duration, error) {
	send, recv := make([]byte, size), make([]byte, size)
	best := math.MaxFloat64
	for range 3 {
		if err := m.Host.Barrier(ctx); err != nil {
			return 0, err
		}
		t0 := time.Now()
		if err := run(ctx, send, recv); err != nil {
			return 0, err
		}
		best = min(best, time.Since(t0).Seconds())
	}
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, math.Float64bits(best))
	if err := m.Host.AllReduce(ctx, b, b, coll.Float64, coll.Max); err != nil {
		return 0, err
	}
	return time.Duration(math.Float64frombits(binary.LittleEndian.Uint64(b)) * float64(time.Second)), nil
}

// AllReduce reduces send into recv with op: the first HostShare of the
// elements on the host rail, the rest on the DPU rail, both at once.
func (m *MultiRail) AllReduce(ctx context.Context, send, recv []byte, dt coll.DType, op coll.Op) error {
	if len(send) != len(recv) || !dt.Valid() || len(send)%dt.Size() != 0 {
		return fmt.Errorf("host: multi-rail allreduce of %d bytes of %v into %d", len(send), dt, len(recv))
	}
	es := dt.Size()
	h := int(math.Round(m.HostShare()*float64(len(send)/es))) * es
	switch h {
	case 0:
		return m.DPU.AllReduce(ctx, send, recv, dt, op)
	case len(send):
		return m.Host.AllReduce(ctx, send, recv, dt, op)
	}
	var wg sync.WaitGroup
	var derr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		derr = m.DPU.AllReduce(ctx, send[h:], recv[h:], dt, op)
	}()
	herr := m.Host.AllReduce(ctx, send[:h], recv[:h], dt, op)
	wg.Wait()
	return errors.Join(herr, derr)
}
