package collbench

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/rail"
	"github.com/hecsys/hec/shared/sysinfo"
	"github.com/hecsys/hec/shared/wire"
)

// RankOptions is one rank of the bench: a host process, with its agent
// when a rail needs it. The driver hands them to the process it starts as
// one argument of JSON (RankOptions.Arg).
type RankOptions struct {
	Root      string        `json:"root"`            // rank 0's rendezvous address
	Agent     string        `json:"agent,omitempty"` // this rank's agent (a region file, or tcp://ADDR)
	TokenFile string        `json:"token_file,omitempty"`
	Listen    string        `json:"listen,omitempty"` // this rank's host-rail listener (default 127.0.0.1:0)
	KeyFile   string        `json:"key_file"`         // the group's key
	Rank      int           `json:"rank"`
	World     int           `json:"world"`
	Rails     []string      `json:"rails"`
	Objective string        `json:"objective"`
	Explain   bool          `json:"explain,omitempty"`
	Kind      string        `json:"op"`
	DType     string        `json:"dtype"`
	Redop     string        `json:"redop"`
	Sizes     []string      `json:"sizes"`
	Iters     int           `json:"iters"`
	Warmup    int           `json:"warmup"`
	Deadline  time.Duration `json:"deadline"`
	// Topology and Retune are auto's (host.MultiRail): the tables kept
	// under the state directory for this topology are taken unless
	// Retune.
	Topology string `json:"topology,omitempty"`
	Retune   bool   `json:"retune,omitempty"`
}

// Arg is o as the one argument a rank's process is given.
func (o RankOptions) Arg() string {
	b, _ := json.Marshal(o) // plain fields: Marshal cannot fail
	return string(b)
}

// ParseRankOptions reads what Arg wrote.
func ParseRankOptions(arg string) (RankOptions, error) {
	var o RankOptions
	if err := json.Unmarshal([]byte(arg), &o); err != nil {
		return o, fmt.Errorf("coll bench rank: its options: %w", err)
	}
	if o.World < 1 || o.Rank < 0 || o.Rank >= o.World {
		return o, fmt.Errorf("coll bench rank: rank %d of %d", o.Rank, o.World)
	}
	return o, nil
}

// rankBench is a rank's state while it runs the sizes.
type rankBench struct {
	o     RankOptions
	g     *coll.Group
	cl    *host.Client
	dpu   *host.DPUComm
	kind  coll.Kind
	dt    coll.DType
	op    coll.Op
	multi *host.MultiRail // auto
}

// RunRank runs one rank of the bench: it joins the group at o.Root (and
// its agent at o.Agent when a rail needs it), runs every size on every
// rail, checks each result, and, as rank 0, writes each row to stdout as
// a line of JSON (the driver's Run reads them).
func RunRank(ctx context.Context, o RankOptions, stdout io.Writer) error {
	key, err := os.ReadFile(o.KeyFile)
	if err != nil {
		return err
	}
	b := &rankBench{o: o}
	if b.kind, err = coll.ParseKind(o.Kind); err != nil {
		return err
	}
	if b.dt, err = coll.ParseDType(o.DType); err != nil {
		return err
	}
	if b.op, err = coll.ParseOp(o.Redop); err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The host rail's measured model, kept per topology (the ranks'
	// hosts) where the agent keeps its own: a later run of the same
	// ranks takes it without measuring.
	var comm coll.Config
	if dir, err := sysinfo.StateDir(); err == nil {
		comm.ModelFile = filepath.Join(dir, "coll-models.json")
	}
	if b.g, err = coll.Open(octx, coll.GroupConfig{Root: o.Root, Listen: o.Listen, Rank: o.Rank, Size: o.World, Key: key,
		Deadline: o.Deadline, Comm: comm}); err != nil {
		return err
	}
	defer b.g.Close()
	if o.Agent != "" {
		var opts []host.Option
		if o.TokenFile != "" {
			tok, err := os.ReadFile(o.TokenFile)
			if err != nil {
				return err
			}
			opts = append(opts, host.WithToken(strings.TrimSpace(string(tok))))
		}
		if b.cl, err = dialAgent(octx, o.Agent, opts...); err != nil {
			return fmt.Errorf("its agent at %s: %w", o.Agent, err)
		}
		defer b.cl.Close()
		nodes := make([]uint32, o.World)
		for i := range nodes {
			nodes[i] = uint32(i) + 1 // the driver numbers the agents so
		}
		// Pieces as large as the largest size (every rank runs the same
		// sizes): the buffers lie in the window, and each collective goes
		// to the agents as one op, as a caller of one size would tune it.
		piece := wire.CollSpec{}.Piece
		if sizes, err := ParseSizes(o.Sizes); err == nil && len(sizes) > 0 {
			piece = uint32(min((slices.Max(sizes)+wire.CollPieceUnit-1)/wire.CollPieceUnit*wire.CollPieceUnit, wire.MaxCollPiece))
		}
		spec := wire.CollSpec{Comm: b.g.Transport.Comm(), Epoch: 1, Nodes: nodes, Piece: piece}
		if b.dpu, err = b.cl.JoinColl(octx, spec); err != nil {
			return err
		}
		b.multi = host.NewMultiRail(b.g.Comm, b.dpu)
		b.multi.Topology, b.multi.Fresh = o.Topology, o.Retune
		if dir, err := sysinfo.StateDir(); err == nil {
			b.multi.TableFile = filepath.Join(dir, "rails-tables.json")
		}
		if b.multi.Objective, err = rail.ParseObjective(o.Objective); err != nil {
			return err
		}
	}
	sizes, err := ParseSizes(o.Sizes)
	if err != nil {
		return err
	}
	if slices.Contains(o.Rails, rail.Auto) {
		if _, err := b.multi.Calibrate(ctx, min(16<<20, sizes[len(sizes)-1]), b.kind); err != nil {
			return fmt.Errorf("calibrating the rails: %w", err)
		}
	}
	// Each size on every rail at once (measure): what the machine does
	// meanwhile weighs on the rails compared alike.
	for _, size := range sizes {
		rows, err := b.measure(ctx, o.Rails, size)
		if err != nil {
			return fmt.Errorf("%v of %d bytes: %w", b.kind, size, err)
		}
		for _, res := range rows {
			if o.Rank == 0 {
				json.NewEncoder(stdout).Encode(res)
			}
		}
	}
	if slices.Contains(o.Rails, rail.Auto) && o.Rank == 0 && o.Explain {
		how := "measured now"
		if b.multi.Kept(b.kind) {
			how = "kept in " + b.multi.TableFile + " by an earlier run of this topology (--retune: measure again)"
		}
		json.NewEncoder(stdout).Encode(Row{Rail: rail.Auto, Explain: "table " + how + "\n" + b.multi.TableFor(b.kind).Explain()})
	}
	if err := b.g.Barrier(ctx); err != nil {
		return err
	}
	if b.dpu != nil {
		// Only after a run that went well: an agent that failed is not
		// waited for (the host library would try to attach again).
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		b.dpu.Leave(lctx)
	}
	return nil
}

// dialAgent dials the agent, trying again for a few seconds while it
// formats its region (the driver waited for the file's size); an agent
// whose heartbeat stood still (it died) is not waited for.
func dialAgent(ctx context.Context, target string, opts ...host.Option) (*host.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		cl, err := host.Dial(ctx, host.ParseTarget(target), opts...)
		if err == nil || errors.Is(err, host.ErrTarget) || errors.Is(err, host.ErrAgentDead) {
			return cl, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// buffers returns send and recv buffers for a collective of size bytes,
// on every rail: in the agent's window where there is an agent (the DPU rail
// takes them in place) and they fit, else ordinary memory; free returns
// them. Every rail runs on the same kind of memory, as nccl-tests runs
// every algorithm on the same buffers: with the host rail's on the heap
// and auto's in the window, auto running the host rail alone took 57 and
// 63 ms at 64 MiB on two ranks against the host rail's 45 (two runs);
// with both in the window, 40–44 against 38–44 (three runs).
func (b *rankBench) buffers(size int) (send, recv []byte, free func()) {
	sn, rn := b.kind.Sizes(size, b.o.World)
	if b.cl != nil && sn+rn+(1<<20) <= b.cl.WindowSize() {
		s, err1 := b.cl.Alloc(max(sn, 64))
		q, err2 := b.cl.Alloc(max(rn, 64))
		if err1 == nil && err2 == nil {
			return s[:sn], q[:rn], func() { b.cl.Free(s); b.cl.Free(q) }
		}
		if err1 == nil {
			b.cl.Free(s)
		}
		if err2 == nil {
			b.cl.Free(q)
		}
	}
	return make([]byte, sn), make([]byte, rn), func() {}
}

// run runs one collective on rail r; auto splits it between the rails.
func (b *rankBench) run(ctx context.Context, r string, send, recv []byte) error {
	switch r {
	case rail.Host:
		return b.g.Run(ctx, b.kind, send, recv, b.dt, b.op, 0)
	case rail.DPU:
		return b.dpu.Run(ctx, b.kind, send, recv, b.dt, b.op, 0)
	}
	return b.multi.Run(ctx, b.kind, send, recv, b.dt, b.op, 0)
}

// barrier starts an iteration on rail r together on every rank, by that
// rail's own barrier, as the MPI program starts each by MPI_Barrier on the
// communicator it times. The DPU rail's goes through the agents: a
// barrier over the host rail between its calls would leave each call's
// wait in a process whose network I/O had just woken Go's monitor thread,
// which then polls every 20 µs through the call (a third of the rank's
// CPU per 1 MiB allreduce, on this bench's two-vCPU machine).
func (b *rankBench) barrier(ctx context.Context, r string) error {
	if r == rail.DPU {
		return b.dpu.Run(ctx, coll.KindBarrier, nil, nil, b.dt, b.op, 0)
	}
	return b.g.Barrier(ctx)
}

func (b *rankBench) maxOver(ctx context.Context, v float64) (float64, error) {
	buf := make([]byte, 8)
	binary.LittleEndian.PutUint64(buf, math.Float64bits(v))
	if err := b.g.AllReduce(ctx, buf, buf, coll.Float64, coll.Max); err != nil {
		return 0, err
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(buf)), nil
}

func (b *rankBench) sumOver(ctx context.Context, v float64) (float64, error) {
	buf := make([]byte, 8)
	binary.LittleEndian.PutUint64(buf, math.Float64bits(v))
	if err := b.g.AllReduce(ctx, buf, buf, coll.Float64, coll.Sum); err != nil {
		return 0, err
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(buf)), nil
}

// measure runs one size on every rail of rails on the same buffers and
// returns a row for each (meaningful on rank 0), every result checked:
// auto's first collectives of the size tune its band (untimed, as a
// job's first ones would), each rail's warmup iterations run in a row,
// and then the timed iterations interleave the rails — each iteration
// one collective of every rail, in each of the rails' orders by turns —
// so that the machine's drift, and what running after another rail
// costs, weigh on every rail alike. A row of 64 MiB on two ranks moved
// by up to a third from one run of its rail to the next when each rail
// ran its iterations in a row.
func (b *rankBench) measure(ctx context.Context, rails []string, size int) ([]Row, error) {
	n, es := b.o.World, b.dt.Size()
	size -= size % (es * n) // whole elements, a whole block per rank
	size = max(size, es*n)
	send, recv, free := b.buffers(size)
	defer free()
	fillInput(b.dt, b.op, b.o.Rank, send)
	want := expectedOutput(b.kind, b.dt, b.op, b.o.Rank, n, len(recv))
	type tally struct {
		elapsed, cpu time.Duration
		wrong        int64
	}
	tallies := make([]tally, len(rails))
	step := func(i int, timed bool) error {
		r := rails[i]
		clear(recv)
		if err := b.barrier(ctx, r); err != nil {
			return err
		}
		c0 := cpuTime()
		t0 := time.Now()
		if err := b.run(ctx, r, send, recv); err != nil {
			return fmt.Errorf("%s rail: %w", r, err)
		}
		d, c := time.Since(t0), cpuTime()-c0
		if timed {
			tallies[i].elapsed += d
			tallies[i].cpu += c
		}
		tallies[i].wrong += countWrong(b.dt, recv, want)
		return nil
	}
	if a := slices.Index(rails, rail.Auto); a >= 0 {
		for i := 0; !b.multi.Tuned(b.kind, size); i++ {
			if i > 200 {
				return nil, fmt.Errorf("auto's tuning of %d bytes did not settle in %d collectives", size, i)
			}
			if err := step(a, false); err != nil {
				return nil, err
			}
		}
	}
	for i := range rails {
		for range b.o.Warmup {
			if err := step(i, false); err != nil {
				return nil, err
			}
		}
	}
	orders := permutations(len(rails))
	for it := range b.o.Iters {
		for _, i := range orders[it%len(orders)] {
			if err := step(i, true); err != nil {
				return nil, err
			}
		}
	}
	var rows []Row
	for i, r := range rails {
		t := tallies[i]
		tmax, err := b.maxOver(ctx, t.elapsed.Seconds()/float64(b.o.Iters))
		if err != nil {
			return nil, err
		}
		w, err := b.sumOver(ctx, float64(t.wrong))
		if err != nil {
			return nil, err
		}
		cpuSum, err := b.sumOver(ctx, t.cpu.Seconds()/float64(b.o.Iters))
		if err != nil {
			return nil, err
		}
		res := Row{Rail: r, Size: size, Count: size / es, Type: b.dt.String(), Redop: b.op.String(),
			TimeUS: tmax * 1e6, Wrong: int64(w), HostCPU: cpuSum / float64(n) * 1e3}
		if !b.kind.Reduces() {
			res.Redop = "none"
		}
		if tmax > 0 {
			res.AlgBW = float64(size) / tmax / 1e9
			res.BusBW = res.AlgBW * b.kind.BusFactor(n)
		}
		if r == rail.Auto {
			p := b.multi.PlanFor(b.kind, size)
			res.Plan = rail.Words(p)
			res.PredictedUS = float64(p.Predicted.Nanoseconds()) / 1e3
			for _, s := range p.Shares {
				if s.Rail == rail.Host {
					res.HostFrac = float64(s.Bytes) / float64(size)
				}
			}
		}
		rows = append(rows, res)
	}
	return rows, nil
}

// permutations are the orders of 0..k-1, every one (k!; k ≤ 3 here).
func permutations(k int) [][]int {
	if k <= 1 {
		return [][]int{make([]int, k)}
	}
	var out [][]int
	for _, p := range permutations(k - 1) {
		for at := 0; at <= len(p); at++ {
			q := append(append(append([]int(nil), p[:at]...), k-1), p[at:]...)
			out = append(out, q)
		}
	}
	return out
}

// cpuTime is this process's CPU time (user and system, every thread).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The bench's data: element i of rank r's input is a small integer, so
// that every type holds every sum, product and mean exactly as the
// kernels compute them, and a result is right or wrong bit for bit.
func inputValue(op coll.Op, r, i int) float64 {
	if op == coll.Prod {
		return float64((r+i)%2 + 1)
	}
	return float64((r+i)%5 + 1)
}

// fillInput writes rank's send buffer.
func fillInput(dt coll.DType, op coll.Op, rank int, send []byte) {
	for i := range len(send) / dt.Size() {
		putElem(dt, send, i, inputValue(op, rank, i))
	}
}

// expectedOutput is what rank's recv must hold after collective k of n
// ranks' fillInput buffers (nil where nothing is checked: Reduce off the
// root, Barrier).
func expectedOutput(k coll.Kind, dt coll.DType, op coll.Op, rank, n, recvLen int) []byte {
	es := dt.Size()
	count := recvLen / es
	out := make([]byte, recvLen)
	reduced := func(i int) {
		// op over the ranks, in float64: exact for these inputs.
		acc := inputValue(op, 0, i)
		for r := 1; r < n; r++ {
			v := inputValue(op, r, i)
			switch op {
			case coll.Sum, coll.Avg:
				acc += v
			case coll.Prod:
				acc *= v
			case coll.Min:
				acc = min(acc, v)
			case coll.Max:
				acc = max(acc, v)
			}
		}
		if op == coll.Avg {
			putAvg(dt, out, i-offsetOf(k, rank, count), acc, n)
			return
		}
		putElem(dt, out, i-offsetOf(k, rank, count), acc)
	}
	switch k {
	case coll.KindAllReduce:
		for i := range count {
			reduced(i)
		}
	case coll.KindReduce:
		if rank != 0 {
			return nil
		}
		for i := range count {
			reduced(i)
		}
	case coll.KindReduceScatter:
		for j := range count {
			reduced(rank*count + j)
		}
	case coll.KindAllGather:
		c := count / n
		for src := range n {
			for j := range c {
				putElem(dt, out, src*c+j, inputValue(op, src, j))
			}
		}
	case coll.KindBroadcast:
		for i := range count {
			putElem(dt, out, i, inputValue(op, 0, i))
		}
	case coll.KindAllToAll:
		c := count / n
		for src := range n {
			for j := range c {
				putElem(dt, out, src*c+j, inputValue(op, src, rank*c+j))
			}
		}
	default:
		return nil
	}
	return out
}

func offsetOf(k coll.Kind, rank, count int) int {
	if k == coll.KindReduceScatter {
		return rank * count
	}
	return 0
}

// countWrong counts the elements of got that differ from want.
func countWrong(dt coll.DType, got, want []byte) int64 {
	if want == nil || bytes.Equal(got[:min(len(got), len(want))], want) {
		return 0 // the common case, at memory speed: the ranks run beside it
	}
	es := dt.Size()
	var n int64
	for i := 0; i+es <= len(want); i += es {
		if string(got[i:i+es]) != string(want[i:i+es]) {
			n++
		}
	}
	return n
}

func putElem(dt coll.DType, b []byte, i int, v float64) {
	switch dt {
	case coll.Float32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	case coll.Float64:
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	case coll.Float16:
		binary.LittleEndian.PutUint16(b[2*i:], coll.F32ToF16(float32(v)))
	case coll.BFloat16:
		binary.LittleEndian.PutUint16(b[2*i:], coll.F32ToBF16(float32(v)))
	case coll.Int32:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(int64(v))))
	case coll.Int64:
		binary.LittleEndian.PutUint64(b[8*i:], uint64(int64(v)))
	case coll.Uint8:
		b[i] = uint8(int64(v))
	}
}

// putAvg writes the mean of n ranks whose sum is sum, divided as the
// kernels divide: in the type's own arithmetic.
func putAvg(dt coll.DType, b []byte, i int, sum float64, n int) {
	switch dt {
	case coll.Float32, coll.Float16, coll.BFloat16:
		putElem(dt, b, i, float64(float32(sum)/float32(n)))
	case coll.Float64:
		putElem(dt, b, i, sum/float64(n))
	case coll.Uint8:
		putElem(dt, b, i, float64(uint8(int64(sum))/uint8(n)))
	default:
		putElem(dt, b, i, float64(int64(sum)/int64(n)))
	}
}

// ParseSizes reads sizes as nccl-tests writes them: 8, 64K, 1M, 16M
// (K, M, G: powers of 1024).
func ParseSizes(ss []string) ([]int, error) {
	var out []int
	for _, s := range ss {
		s = strings.TrimSpace(strings.ToUpper(s))
		mult := 1
		switch {
		case strings.HasSuffix(s, "K"):
			mult, s = 1<<10, s[:len(s)-1]
		case strings.HasSuffix(s, "M"):
			mult, s = 1<<20, s[:len(s)-1]
		case strings.HasSuffix(s, "G"):
			mult, s = 1<<30, s[:len(s)-1]
		}
		var v int
		if _, err := fmt.Sscanf(s, "%d", &v); err != nil || v <= 0 || fmt.Sprint(v) != s {
			return nil, fmt.Errorf("size %q: want a count of bytes, as 8, 64K, 1M or 16M", s)
		}
		if v > (1<<30)/mult {
			return nil, fmt.Errorf("size %s: at most 1G", s)
		}
		out = append(out, v*mult)
	}
	if len(out) == 0 {
		return nil, errors.New("no sizes")
	}
	return out, nil
}
