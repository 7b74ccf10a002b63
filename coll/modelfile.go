package coll

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/hecsys/hec/shared/durable"
)

// storedModel is one topology's fitted model in Config.ModelFile.
type storedModel struct {
	AlphaNS    int64     `json:"alpha_ns"`
	Rate       float64   `json:"rate_bytes_per_s"`
	ReduceRate float64   `json:"reduce_rate_bytes_per_s,omitempty"`
	MeasuredAt time.Time `json:"measured_at"`
}

// modelKey is the communicator's entry in the model file: its topology,
// size and chunk (the terms depend on both).
func (c *Comm) modelKey() string {
	return fmt.Sprintf("%s|ranks=%d|chunk=%d", c.cfg.Topology, c.size, c.cfg.Chunk)
}

// readModels reads a model file; a missing or unreadable one is empty.
func readModels(path string) map[string]storedModel {
	m := map[string]storedModel{}
	if b, err := os.ReadFile(path); err == nil {
		json.Unmarshal(b, &m) //nolint:errcheck // a damaged file is measured over
	}
	return m
}

// loadModel has every rank take rank 0's stored model for this topology,
// if it has one (ok): rank 0 reads its model file and broadcasts what it
// found, a small collective numbered as one of its own. Every rank runs
// it, whether or not its own Config names a model file, so that ranks
// configured apart still run the same collectives.
func (c *Comm) loadModel(ctx context.Context) (ok bool, err error) {
	msg := make([]byte, 32)
	if c.rank == 0 && c.cfg.ModelFile != "" {
		if s, found := readModels(c.cfg.ModelFile)[c.modelKey()]; found && s.AlphaNS > 0 && s.Rate > 0 && s.ReduceRate >= 0 {
			binary.LittleEndian.PutUint64(msg, 1)
			binary.LittleEndian.PutUint64(msg[8:], uint64(s.AlphaNS))
			binary.LittleEndian.PutUint64(msg[16:], math.Float64bits(s.Rate))
			binary.LittleEndian.PutUint64(msg[24:], math.Float64bits(s.ReduceRate))
		}
	}
	c.nextSeq()
	if err := c.bcastTree(ctx, msg, 0); err != nil {
		return false, err
	}
	c.nextSeq()
	if binary.LittleEndian.Uint64(msg) != 1 {
		return false, nil
	}
	alpha := time.Duration(binary.LittleEndian.Uint64(msg[8:]))
	rate := math.Float64frombits(binary.LittleEndian.Uint64(msg[16:]))
	reduce := math.Float64frombits(binary.LittleEndian.Uint64(msg[24:]))
	if alpha <= 0 || !(rate > 0) || math.IsInf(rate, 0) || !(reduce >= 0) || math.IsInf(reduce, 0) {
		return false, nil // rank 0 sent it, every rank sees the same: all measure
	}
	c.cfg.Alpha, c.cfg.Rate, c.cfg.ReduceRate = alpha, rate, reduce
	return true, nil
}

// saveModel records the fitted model for this topology in the model file
// (rank 0's): failing to keep it costs a measurement next time, nothing
// else.
func (c *Comm) saveModel() {
	if c.cfg.ModelFile == "" {
		return
	}
	m := readModels(c.cfg.ModelFile)
	m[c.modelKey()] = storedModel{AlphaNS: int64(c.cfg.Alpha), Rate: c.cfg.Rate, ReduceRate: c.cfg.ReduceRate, MeasuredAt: time.Now().UTC()}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return
	}
	os.MkdirAll(filepath.Dir(c.cfg.ModelFile), 0o755) //nolint:errcheck // WriteFile says
	durable.WriteFile(c.cfg.ModelFile, b, 0o644)      //nolint:errcheck // measured again next time
}
