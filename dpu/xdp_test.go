package dpu

import (
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/hecsys/hec/bpf"
	"github.com/hecsys/hec/kv"
)

// TestHotAdmission: keys GET-requested often enough in user space are
// admitted, the hottest first within the key limit, values over the size
// limit never; idle keys leave.
func TestHotAdmission(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading XDP programs needs root")
	}
	store, err := kv.Open(t.TempDir(), kv.WithInMemory())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	prog, err := bpf.Load(bpf.Config{HotGET: true, Ports: bpf.Ports{UDPGet: 11311}})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	limit := 2
	x := &xdp{cfg: XDPConfig{HotKeys: &limit, HotMaxValue: 16, HotMinRate: 100}, store: store, log: slog.New(slog.DiscardHandler),
		prog: prog, hot: prog.Hot(), seen: map[string]uint32{}, idle: map[string]int{}}
	for k, v := range map[string]string{"a": "1", "b": "2", "c": "3", "big": strings.Repeat("x", 17), "cold": "4"} {
		if _, err := store.Put([]byte(k), []byte(v), kv.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	held := func() []string {
		es, err := x.hot.Entries(false)
		if err != nil {
			t.Fatal(err)
		}
		var ks []string
		for _, e := range es {
			if e.Served {
				ks = append(ks, e.Key)
			}
		}
		slices.Sort(ks)
		return ks
	}
	gets := func(key string, n int) {
		for range n {
			x.seenGET([]byte(key))
		}
	}
	// 100/s over a 200 ms round: 20 GETs make a key hot.
	gets("a", 50)
	gets("b", 30)
	gets("c", 25)
	gets("big", 90)
	gets("cold", 5)
	gets("missing", 40)
	x.admitRound()
	if got := held(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("held %v, want the two hottest that fit: [a b]", got)
	}
	// c becomes hotter than what b gets in XDP: it takes b's place.
	gets("c", 60)
	x.admitRound()
	if got := held(); !slices.Contains(got, "c") || len(got) != 2 {
		t.Fatalf("held %v, want c among two", got)
	}
	// Nothing asked for: after hotIdleRounds rounds, nothing held.
	for range hotIdleRounds {
		x.admitRound()
	}
	if got := held(); len(got) != 0 {
		t.Fatalf("idle keys still held: %v", got)
	}
}
