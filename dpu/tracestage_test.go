package dpu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/trace"
)

// TestServicesRecordTheirStages: while the agent records, an EC encode
// records each round of the coder's work (StageCode) under the op's id,
// within its serve span, over shared memory and over TCP alike (both map
// the op's bytes: nothing is staged); a KV put records the store's write
// (StageCommit). While nothing records, none of it is.
func TestServicesRecordTheirStages(t *testing.T) {
	dir := t.TempDir()
	shm := filepath.Join("/dev/shm", fmt.Sprintf("hec-dpu-stages-%d-%d", os.Getpid(), time.Now().UnixNano()))
	t.Cleanup(func() { os.Remove(shm) })
	a := runAgent(t, Config{
		Agent: AgentConfig{Shm: shm, RegionSize: 64 << 20, QueuePairs: 2, TCP: "127.0.0.1:0", Mgmt: Off, StateDir: dir},
		RESP:  RESPConfig{Addr: Off}, UDP: UDPConfig{Addr: Off},
	})
	ctx := context.Background()
	rec := a.Dispatcher().Trace()
	for _, target := range []string{"shm://" + shm, "tcp://" + a.Addr("tcp")} {
		c, err := host.Dial(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		e, err := c.EC(10, 4, host.WithRails(host.RailsDPU))
		if err != nil {
			t.Fatal(err)
		}
		shards := make([][]byte, 14)
		buf, err := c.Alloc(14 * (400 << 10))
		if err != nil {
			buf = make([]byte, 14*(400<<10))
		}
		for i := range shards {
			shards[i] = buf[i*(400<<10) : (i+1)*(400<<10)]
			for j := range shards[i] {
				shards[i][j] = byte(i + j)
			}
		}
		kv := c.KV()
		run := func() {
			if _, err := e.Encode(ctx, shards); err != nil {
				t.Fatal(err)
			}
			if err := kv.Put(ctx, []byte("stage-key"), []byte("a value"), host.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		m := rec.Mark()
		run() // nothing records
		if spans, _ := rec.Since(m); len(spans) != 0 {
			t.Fatalf("%s: %d spans recorded while nothing recorded", target, len(spans))
		}
		end := rec.Begin()
		run()
		end()
		spans, _ := rec.Since(m)
		serve := map[string]trace.Span{}
		stages := map[string]map[string]int{} // by op name: stage → count
		for _, s := range spans {
			if stages[s.Name] == nil {
				stages[s.Name] = map[string]int{}
			}
			stages[s.Name][s.Stage]++
			if s.Stage == trace.StageServe {
				serve[s.ID] = s
			}
		}
		for _, s := range spans {
			if s.Stage != trace.StageCode && s.Stage != trace.StageCopy && s.Stage != trace.StageCommit {
				continue
			}
			sv, ok := serve[s.ID]
			if !ok || s.Start < sv.Start || s.Start+s.Dur > sv.Start+sv.Dur {
				t.Errorf("%s: %s %s span %+v outside its op's serve span %+v", target, s.Name, s.Stage, s, sv)
			}
		}
		t.Logf("%s: %v", target, stages)
		enc, put := stages["ec_encode"], stages["kv_put"]
		if enc[trace.StageServe] != 1 || enc[trace.StageCode] < 1 {
			t.Errorf("%s: encode's spans %v, want a serve and each round's code", target, enc)
		}
		if put[trace.StageCommit] != 1 {
			t.Errorf("%s: put's spans %v, want its commit", target, put)
		}
	}
}
