package collbench

import (
	"strings"
	"testing"
)

// rank 0's stdout, written in pieces that split lines anywhere: every row
// arrives once, in order; lines that are not rows, or too long to be, do
// not.
func TestRowWriter(t *testing.T) {
	out := `{"rail":"host","size":8}` + "\n" + "not a row\n" + `{"rail":"dpu","size":1048576}` + "\n" +
		strings.Repeat("x", maxRowLine+10) + "\n" + `{"rail":"auto","size":64}` + "\n" + `{"rail":"host"` // no newline: not yet a row
	for _, piece := range []int{1, 7, 4096, len(out)} {
		results := make(chan Row, 8)
		w := &rowWriter{results: results}
		for rest := out; len(rest) > 0; {
			n := min(piece, len(rest))
			if k, err := w.Write([]byte(rest[:n])); k != n || err != nil {
				t.Fatalf("Write: %d, %v", k, err)
			}
			rest = rest[n:]
		}
		close(results)
		var got []string
		for r := range results {
			got = append(got, r.Rail)
		}
		if strings.Join(got, ",") != "host,dpu,auto" {
			t.Errorf("pieces of %d bytes: rows %v, want host, dpu, auto", piece, got)
		}
	}
}
