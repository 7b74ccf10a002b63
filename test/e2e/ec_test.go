package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hecsys/hec/ec"
	"github.com/hecsys/hec/host"
)

// TestECFilesAsANewUser does what the README tells a new user: hecctl ec
// encode a file through a running hecd, lose shard files, decode it back
// byte-identical; a corrupted shard is reported and skipped; one loss too
// many is a clear error that writes nothing.
func TestECFilesAsANewUser(t *testing.T) {
	region, mgmt, tcp, _ := startHecd(t)
	dir := t.TempDir()
	data := make([]byte, 24<<20+4321) // not a multiple of anything
	r := rand.New(rand.NewPCG(5, 6))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	in := filepath.Join(dir, "in")
	os.WriteFile(in, data, 0o644)
	env := []string{"HEC_AGENT=shm://" + region, "HEC_MGMT=" + mgmt}
	run := func(want int, args ...string) cliResult {
		t.Helper()
		res := hecctl(t, env, args...)
		if res.code != want {
			t.Fatalf("hecctl %v: exit %d, want %d\n%s%s", args, res.code, want, res.stdout, res.stderr)
		}
		return res
	}
	const k, m = 10, 4
	for _, tc := range []struct{ rails, agent string }{{"auto", ""}, {"dpu", ""}, {"dpu", "tcp://" + tcp}, {"host", ""}} {
		t.Run(tc.rails+"/"+strings.SplitN(tc.agent+"shm", ":", 2)[0], func(t *testing.T) {
			enc := filepath.Join(t.TempDir(), "enc")
			agentArgs := []string{}
			if tc.agent != "" {
				agentArgs = []string{"--agent", tc.agent}
			}
			res := run(0, append([]string{"ec", "encode", "--data", fmt.Sprint(k), "--parity", fmt.Sprint(m), "--rails", tc.rails, "--in", in, "--out", enc, "-o", "json"}, agentArgs...)...)
			var out struct {
				Manifest ec.Manifest `json:"manifest"`
				Coding   struct {
					RailBytes map[string]int64 `json:"rail_bytes"`
				} `json:"coding"`
			}
			if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
				t.Fatalf("%v: %s", err, res.stdout)
			}
			if out.Manifest.Size != int64(len(data)) || len(out.Manifest.Shards) != k+m {
				t.Fatalf("manifest %+v", out.Manifest)
			}
			if tc.rails == "dpu" && out.Coding.RailBytes["dpu"] < int64(len(data)) || tc.rails == "host" && out.Coding.RailBytes["dpu"] != 0 {
				t.Fatalf("rails %s coded %v", tc.rails, out.Coding.RailBytes)
			}
			// Any m lost: three patterns.
			for _, lost := range [][]int{{0, 1, 2, 3}, {6, 9, 10, 13}, {10, 11, 12, 13}} {
				saved := map[int][]byte{}
				for _, i := range lost {
					p := filepath.Join(enc, ec.ShardName(i))
					saved[i], _ = os.ReadFile(p)
					os.Remove(p)
				}
				outFile := filepath.Join(t.TempDir(), "out")
				res := run(0, append([]string{"ec", "decode", "--rails", tc.rails, "--in", enc, "--out", outFile}, agentArgs...)...)
				if got, _ := os.ReadFile(outFile); !bytes.Equal(got, data) {
					t.Fatalf("lost %v: decoded file differs\n%s", lost, res.stdout)
				}
				for i, b := range saved {
					os.WriteFile(filepath.Join(enc, ec.ShardName(i)), b, 0o644)
				}
			}
			run(0, "ec", "verify", "--in", enc)
			// m-1 lost and one corrupted: reported, and still rebuilt.
			for _, i := range []int{2, 5, 12} {
				os.Remove(filepath.Join(enc, ec.ShardName(i)))
			}
			p := filepath.Join(enc, ec.ShardName(7))
			b, _ := os.ReadFile(p)
			b[len(b)/3] ^= 0x10
			os.WriteFile(p, b, 0o644)
			outFile := filepath.Join(t.TempDir(), "out")
			res = run(0, append([]string{"ec", "decode", "--rails", tc.rails, "--in", enc, "--out", outFile}, agentArgs...)...)
			if !strings.Contains(res.stderr, "shard 7 (shard-07): corrupt") || !strings.Contains(res.stdout, "rebuilt data shards 2, 5, 7") {
				t.Fatalf("corruption not reported:\n%s%s", res.stdout, res.stderr)
			}
			if got, _ := os.ReadFile(outFile); !bytes.Equal(got, data) {
				t.Fatal("decoded file differs")
			}
			if res := run(1, "ec", "verify", "--in", enc); !strings.Contains(res.stdout, "4 bad shards; 10 valid remain") {
				t.Fatalf("verify:\n%s", res.stdout)
			}
			// One more lost: too few; nothing written.
			os.Remove(filepath.Join(enc, ec.ShardName(0)))
			outFile = filepath.Join(t.TempDir(), "out")
			res = run(1, append([]string{"ec", "decode", "--rails", tc.rails, "--in", enc, "--out", outFile}, agentArgs...)...)
			if !strings.Contains(res.stderr, "9 valid shards of 14, 10 needed") {
				t.Fatalf("too few shards:\n%s", res.stderr)
			}
			if _, err := os.Stat(outFile); err == nil {
				t.Fatal("a failed decode wrote its output")
			}
		})
	}
	st, err := host.NewMgmt(mgmt).Status(context.Background())
	if err != nil || st.EC == nil || st.EC.EncodedBytes < 2*uint64(len(data)) || st.EC.RebuiltBytes == 0 || st.EC.SIMD == "" {
		t.Fatalf("status ec %+v (%v)", st.EC, err)
	}
	// Bad command lines.
	for _, a := range [][]string{
		{"ec", "encode", "--in", in},
		{"ec", "encode", "--data", "250", "--parity", "10", "--in", in, "--out", filepath.Join(dir, "x")},
		{"ec", "encode", "--rails", "gpu", "--in", in, "--out", filepath.Join(dir, "x")},
		{"ec", "plan"},
	} {
		if res := hecctl(t, env, a...); res.code != 2 {
			t.Errorf("hecctl %v: exit %d, want 2 (usage)\n%s", a, res.code, res.stderr)
		}
	}
	if res := run(0, "ec", "plan", "--size", "64MiB"); !strings.Contains(res.stdout, "model dpu") {
		t.Errorf("plan:\n%s", res.stdout)
	}
}
