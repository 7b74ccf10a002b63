package resp

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// Two commands with a bug, served only in this test binary (added in
// init, before any server reads the table).
func init() {
	boom := func(*client, context.Context, [][]byte) {
		panic("a bug: assignment to entry in nil map")
	}
	for _, cmd := range []*command{
		{name: "TESTPANICLOOP", arity: 1, flags: onLoop, run: boom},
		{name: "TESTPANICWORKER", arity: 1, flags: write, run: boom},
	} {
		cmd.lower = strings.ToLower(cmd.name)
		commands[cmd.name] = cmd
	}
}

// TestPanickingCommandIsContained: a command that panics — on the event
// loop, on a worker, inside MULTI … EXEC (which holds the store's gate
// alone) — answers its client an internal error and closes that
// connection; another client is served as before, its writes too.
func TestPanickingCommandIsContained(t *testing.T) {
	addr, _ := startServer(t, "")
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	neighbour, nr := dial()
	defer neighbour.Close()
	for i, lines := range [][]string{
		{"TESTPANICLOOP"},
		{"TESTPANICWORKER"},
		{"SET k v", "TESTPANICWORKER", "GET k"},
		{"MULTI", "SET k v2", "TESTPANICLOOP", "EXEC"},
	} {
		c, r := dial()
		fmt.Fprintf(c, "%s\r\n", strings.Join(lines, "\r\n"))
		var got []string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				break // closed
			}
			got = append(got, strings.TrimSpace(line))
		}
		c.Close()
		if len(got) == 0 || !strings.HasPrefix(got[len(got)-1], "-ERR internal error") {
			t.Fatalf("%q: replies %q, want the last an internal error, then the connection closed", lines, got)
		}
		fmt.Fprintf(neighbour, "SET n%d x\r\nGET n%d\r\n", i, i)
		for _, want := range []string{"+OK", "$1", "x"} {
			if line, err := nr.ReadString('\n'); err != nil || strings.TrimSpace(line) != want {
				t.Fatalf("after %q the neighbour read %q, %v; want %s", lines, line, err, want)
			}
		}
	}
}
