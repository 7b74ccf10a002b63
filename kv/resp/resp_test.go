package resp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hecsys/hec/kv"
)

func startServer(t *testing.T, password string) (string, *Server) {
	return startServerWith(t, password, kv.Async)
}

func startServerWith(t *testing.T, password string, d kv.Durability, opts ...func(*Server)) (string, *Server) {
	t.Helper()
	st, err := kv.Open(t.TempDir(), kv.WithDurability(d))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Store: st, Password: password, Limits: Limits{MaxBulk: 1 << 20, MaxRequest: 4 << 20}}
	for _, o := range opts {
		o(s)
	}
	done := make(chan struct{})
	go func() { s.Serve(context.Background(), ln); close(done) }()
	t.Cleanup(func() { ln.Close(); <-done; s.Close(); st.Close() })
	return ln.Addr().String(), s
}

func TestGoRedisClient(t *testing.T) {
	addr, _ := startServer(t, "")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Ping(ctx).Err())
	if v, err := c.Echo(ctx, "hi").Result(); v != "hi" || err != nil {
		t.Fatal(v, err)
	}
	must(c.Set(ctx, "a", "1", 0).Err())
	if v, _ := c.Get(ctx, "a").Result(); v != "1" {
		t.Fatal(v)
	}
	if _, err := c.Get(ctx, "missing").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("missing key: %v", err)
	}
	if ok, _ := c.SetNX(ctx, "a", "2", 0).Result(); ok {
		t.Fatal("SET NX on present key")
	}
	if ok, _ := c.SetXX(ctx, "nope", "2", 0).Result(); ok {
		t.Fatal("SET XX on absent key")
	}
	must(c.Set(ctx, "e", "x", 10*time.Second).Err())
	if ttl, _ := c.TTL(ctx, "e").Result(); ttl < 9*time.Second || ttl > 10*time.Second {
		t.Fatalf("TTL %v", ttl)
	}
	must(c.Set(ctx, "p", "x", 1500*time.Millisecond).Err()) // PX: lives 1.5 to 2.5 s
	if ttl, _ := c.PTTL(ctx, "p").Result(); ttl < 1400*time.Millisecond || ttl > 2500*time.Millisecond {
		t.Fatalf("PTTL %v", ttl)
	}
	if ok, _ := c.Persist(ctx, "e").Result(); !ok {
		t.Fatal("PERSIST")
	}
	if ttl, _ := c.TTL(ctx, "e").Result(); ttl != -1 {
		t.Fatalf("TTL after PERSIST %v", ttl)
	}
	if ok, _ := c.Expire(ctx, "e", time.Hour).Result(); !ok {
		t.Fatal("EXPIRE")
	}
	if ttl, _ := c.TTL(ctx, "missing").Result(); ttl != -2 {
		t.Fatalf("TTL of missing %v", ttl)
	}
	must(c.MSet(ctx, "m1", "v1", "m2", "v2").Err())
	if vs, _ := c.MGet(ctx, "m1", "nope", "m2").Result(); vs[0] != "v1" || vs[1] != nil || vs[2] != "v2" {
		t.Fatal(vs)
	}
	if n, _ := c.Exists(ctx, "m1", "m2", "nope").Result(); n != 2 {
		t.Fatal(n)
	}
	if n, _ := c.Incr(ctx, "n").Result(); n != 1 {
		t.Fatal(n)
	}
	if n, _ := c.IncrBy(ctx, "n", 41).Result(); n != 42 {
		t.Fatal(n)
	}
	if n, _ := c.DecrBy(ctx, "n", 2).Result(); n != 40 {
		t.Fatal(n)
	}
	if n, _ := c.Decr(ctx, "n").Result(); n != 39 {
		t.Fatal(n)
	}
	if err := c.Incr(ctx, "a2x").Err(); err != nil {
		t.Fatal(err)
	}
	c.Set(ctx, "s", "abc", 0)
	if err := c.Incr(ctx, "s").Err(); err == nil || !strings.Contains(err.Error(), "not an integer") {
		t.Fatalf("INCR of a string: %v", err)
	}
	for i := 0; i < 30; i++ {
		c.Set(ctx, fmt.Sprintf("scan:%02d", i), i, 0)
	}
	var keys []string
	iter := c.Scan(ctx, 0, "scan:*", 7).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	must(iter.Err())
	sort.Strings(keys)
	if len(keys) != 30 || keys[29] != "scan:29" {
		t.Fatalf("SCAN MATCH found %d", len(keys))
	}
	if n, _ := c.DBSize(ctx).Result(); n < 30 {
		t.Fatalf("DBSIZE %d", n)
	}
	if n, _ := c.Del(ctx, "m1", "m2", "nope").Result(); n != 2 {
		t.Fatal(n)
	}
	if info, _ := c.Info(ctx).Result(); !strings.Contains(info, "redis_version") {
		t.Fatal(info)
	}
	if v, _ := c.ConfigGet(ctx, "appendonly").Result(); v["appendonly"] != "no" {
		t.Fatal(v)
	}
	must(c.Do(ctx, "SELECT", "0").Err())
	if err := c.Do(ctx, "SELECT", "1").Err(); err == nil {
		t.Fatal("SELECT 1 accepted")
	}
	must(c.Do(ctx, "CLIENT", "SETNAME", "me").Err())
	if err := c.Do(ctx, "NOSUCH", "x").Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR unknown command") {
		t.Fatalf("unknown command: %v", err)
	}
	if err := c.Do(ctx, "GET").Err(); err == nil || !strings.Contains(err.Error(), "wrong number of arguments") {
		t.Fatalf("arity: %v", err)
	}
	// Pipelining.
	pipe := c.Pipeline()
	for i := 0; i < 100; i++ {
		pipe.Set(ctx, fmt.Sprintf("pl%d", i), i, 0)
	}
	get := pipe.Get(ctx, "pl99")
	if _, err := pipe.Exec(ctx); err != nil || get.Val() != "99" {
		t.Fatalf("pipeline: %v %q", err, get.Val())
	}
}

func TestAuth(t *testing.T) {
	addr, _ := startServer(t, "s3cret")
	ctx := context.Background()
	bad := redis.NewClient(&redis.Options{Addr: addr, Password: "wrong"})
	defer bad.Close()
	if err := bad.Ping(ctx).Err(); err == nil {
		t.Fatal("wrong password accepted")
	}
	none := redis.NewClient(&redis.Options{Addr: addr})
	defer none.Close()
	if err := none.Get(ctx, "x").Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("no password: %v", err)
	}
	good := redis.NewClient(&redis.Options{Addr: addr, Password: "s3cret"})
	defer good.Close()
	if err := good.Set(ctx, "x", "y", 0).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestRedisCLI drives Debian's redis-cli as a user would.
func TestRedisCLI(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not installed (make test installs redis-tools as root)")
	}
	addr, _ := startServer(t, "")
	host, port, _ := net.SplitHostPort(addr)
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(cli, append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"PING"}, "PONG"},
		{[]string{"SET", "k", "v", "EX", "100"}, "OK"},
		{[]string{"GET", "k"}, "v"},
		{[]string{"SET", "k", "w", "NX"}, ""},
		{[]string{"SET", "k", "w", "XX", "GET"}, "v"},
		{[]string{"TTL", "k"}, "-1"},
		{[]string{"EXPIRE", "k", "50"}, "1"},
		{[]string{"INCRBY", "n", "5"}, "5"},
		{[]string{"MSET", "a", "1", "b", "2"}, "OK"},
		{[]string{"MGET", "a", "b", "c"}, "1\n2"}, // the missing one prints as an empty line
		{[]string{"EXISTS", "a", "c"}, "1"},
		{[]string{"DEL", "a", "b"}, "2"},
		{[]string{"DBSIZE"}, "2"},
		{[]string{"ECHO", "hello world"}, "hello world"},
		{[]string{"CONFIG", "GET", "save"}, "save"},
		{[]string{"PERSIST", "k"}, "1"},
		{[]string{"COMMAND", "COUNT"}, strconv.Itoa(len(commandTable))},
		{[]string{"SELECT", "0"}, "OK"},
		{[]string{"CLIENT", "SETNAME", "tour"}, "OK"},
		{[]string{"GET", "k", "extra"}, "ERR wrong number of arguments for 'get' command"},
		{[]string{"FLUSHALL", "NOW"}, "ERR syntax error"},
		{[]string{"QUIT"}, "OK"},
	} {
		if got := run(tt.args...); got != tt.want {
			t.Errorf("redis-cli %v = %q, want %q", tt.args, got, tt.want)
		}
	}
	if got := run("--scan", "--pattern", "*"); !strings.Contains(got, "k") || !strings.Contains(got, "n") {
		t.Errorf("--scan: %q", got)
	}
	if got := run("COMMAND", "INFO", "get", "set"); !strings.Contains(got, "get") || !strings.Contains(got, "readonly") ||
		!strings.Contains(got, "set") || !strings.Contains(got, "write") {
		t.Errorf("COMMAND INFO get set: %q", got)
	}
	if got := run("FLUSHDB"); got != "OK" {
		t.Errorf("FLUSHDB: %q", got)
	}
	if got := run("DBSIZE"); got != "0" {
		t.Errorf("DBSIZE after FLUSHDB: %q", got)
	}
	run("SET", "x", "1")
	if got := run("FLUSHALL", "ASYNC"); got != "OK" {
		t.Errorf("FLUSHALL ASYNC: %q", got)
	}
	if got := run("GET", "x"); got != "" {
		t.Errorf("GET after FLUSHALL: %q", got)
	}
	if got := run("NOSUCH"); !strings.HasPrefix(got, "ERR unknown command") {
		t.Errorf("unknown command: %q", got)
	}
	if got := run("HELLO", "2"); !strings.Contains(got, "redis") || !strings.Contains(got, "proto") {
		t.Errorf("HELLO 2: %q", got)
	}
	if got := run("HELLO", "3"); !strings.HasPrefix(got, "NOPROTO") {
		t.Errorf("HELLO 3: %q", got)
	}
	if got := run("INFO", "keyspace"); !strings.Contains(got, "db0:keys=") {
		t.Errorf("INFO: %q", got)
	}
}

// TestBadClientsDoNotDisturbOthers: garbage, oversize bulks, a slow reader.
func TestBadClientsDoNotDisturbOthers(t *testing.T) {
	addr, s := startServer(t, "")
	ctx := context.Background()
	good := redis.NewClient(&redis.Options{Addr: addr})
	defer good.Close()
	for _, junk := range []string{
		"*2\r\n$3\r\nGET\r\n$999999999\r\n", // bulk over the limit
		"*99999999999\r\n",                  // too many args
		"*1\r\n+GET\r\n",                    // not a bulk
		"*1\r\n$3\r\nGETXX",                 // no CRLF after bulk
		strings.Repeat("A", 100<<10) + "\n", // inline line too long
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(junk))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		// A protocol error is answered and the connection closed; a
		// truncated request ("GETXX") gets nothing: the server waits for the
		// rest until the read deadline, and we close it.
		reply, _ := bufio.NewReader(c).ReadString('\n')
		if reply != "" && !strings.HasPrefix(reply, "-ERR Protocol error") {
			t.Errorf("junk %q: reply %q", junk[:min(len(junk), 20)], reply)
		}
		c.Close()
		if err := good.Set(ctx, "still", "fine", 0).Err(); err != nil {
			t.Fatalf("good client after junk %q: %v", junk[:min(len(junk), 20)], err)
		}
	}
	if s.rejected.Load() < 3 {
		t.Fatalf("only %d protocol errors counted", s.rejected.Load())
	}
}

// FuzzParse: limits hold for any input, and a request split anywhere
// across reads parses exactly as it does whole.
func FuzzParse(f *testing.F) {
	f.Add([]byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), uint8(3))
	f.Add([]byte("PING\r\n\r\n*0\r\n*1\r\n$4\r\nPING\r\n"), uint8(1))
	f.Add([]byte("*1\r\n$-1\r\n"), uint8(5))
	// Control characters inside arguments, and lone CR or LF.
	f.Add([]byte("*2\r\n$9\r\nNOSUCHCMD\r\n$16\r\nx\r\n$4\r\nFAKE\r\n+\r\n"), uint8(7))
	f.Add([]byte("GET a\rb\r\nSET k\x00v x\n\r\n"), uint8(2))
	f.Add([]byte("*1\r\n$3\r\n\r\n\r\r\n"), uint8(1))
	// Inline quotes, balanced and not; multibulk counts out of range.
	f.Add([]byte("SET \"a b\\x41\\n\" 'c\\'d'\r\nset \"\"\"k\"\"\" v\r\n*-10\r\n*3000000000\r\n"), uint8(4))
	lim := Limits{MaxArgs: 64, MaxBulk: 1024, MaxRequest: 4096, MaxInline: 256}.withDefaults()
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		whole := parseAll(t, in, len(in), lim)
		split := parseAll(t, in, int(step)+1, lim)
		if whole != split {
			t.Fatalf("whole input parses as %q, fed %d bytes at a time as %q", whole, int(step)+1, split)
		}
		// Whatever a client sent, an error echoing it is one line.
		var w Writer
		w.Error("ERR unknown command '" + string(in) + "'")
		if out := w.buf; bytes.ContainsAny(out[:len(out)-2], "\r\n") || len(out) > maxError+3 {
			t.Fatalf("error reply %q is not one bounded line", out)
		}
	})
}

// parseAll feeds in to a Parser step bytes at a time, as reads would (it
// resumes where the last read stopped), and returns the commands it found
// and how it ended.
func parseAll(t *testing.T, in []byte, step int, lim Limits) string {
	var out strings.Builder
	var buf []byte
	var args [][]byte
	var p Parser
	for fed := 0; fed < len(in); {
		next := min(len(in), fed+step)
		buf = append(buf, in[fed:next]...)
		fed = next
		for {
			var n int
			var err error
			args, n, err = p.Parse(buf, lim, args)
			if err != nil {
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("error not a protocol error: %v", err)
				}
				return out.String() + "error"
			}
			if n == 0 {
				break
			}
			if n > len(buf) {
				t.Fatalf("used %d of %d bytes", n, len(buf))
			}
			total := 0
			for _, a := range args {
				total += len(a)
			}
			if len(args) > lim.MaxArgs || total > lim.MaxRequest {
				t.Fatalf("limits broken: %d args, %d bytes", len(args), total)
			}
			if len(args) > 0 {
				fmt.Fprintf(&out, "%q;", args)
			}
			buf = buf[n:]
		}
	}
	return out.String()
}

// TestInlineQuotes: inline requests split as Redis's sdssplitargs.
func TestInlineQuotes(t *testing.T) {
	lim := Limits{}.withDefaults()
	for _, tt := range []struct {
		in   string
		want []string // nil: unbalanced quotes
	}{
		{`SET "a b" v`, []string{"SET", "a b", "v"}},
		{`SET "\x41\n\"q\\" 'c\'d'`, []string{"SET", "A\n\"q\\", "c'd"}},
		{`SET "" ''`, []string{"SET", "", ""}},
		{`set """test-key""" test-value`, nil},
		{`SET "open`, nil},
		{`SET 'a'b`, nil},
		{`SET a"b" c`, []string{"SET", "ab", "c"}},
		{`SET x"y"z 1`, nil},
		{`SET "\x4G" 1`, []string{"SET", "x4G", "1"}},
	} {
		args, _, err := parseInline([]byte(tt.in+"\r\n"), lim, nil)
		if tt.want == nil {
			if err == nil || !strings.Contains(err.Error(), "unbalanced quotes") {
				t.Errorf("%s: %q, %v; want unbalanced quotes", tt.in, args, err)
			}
			continue
		}
		var got []string
		for _, a := range args {
			got = append(got, string(a))
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestGlob(t *testing.T) {
	for _, tt := range []struct {
		p, s string
		ok   bool
	}{
		{"*", "anything", true}, {"user:*", "user:1", true}, {"user:*", "usr:1", false},
		{"h?llo", "hello", true}, {"h[ae]llo", "hallo", true}, {"h[^e]llo", "hello", false},
		{"h[a-b]llo", "hbllo", true}, {"a\\*b", "a*b", true}, {"a\\*b", "axb", false}, {"**x", "yyx", true},
		// Redis's "Regression for pattern matching long nested loops": the
		// old recursive matcher took exponential time here.
		{"a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", strings.Repeat("a", 40), false},
		{"*a*b", "xxaxxbxxb", true}, {"*a?", "ba", false}, {"a*", "a", true}, {"*[", "x[", false},
	} {
		if got := globMatch([]byte(tt.p), []byte(tt.s)); got != tt.ok {
			t.Errorf("globMatch(%q, %q) = %v", tt.p, tt.s, got)
		}
	}
	// Against the plain recursive matcher, on short random patterns.
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(alphabet string, n int) []byte {
		b := make([]byte, rng.IntN(n+1))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return b
	}
	for range 200000 {
		p, s := word("ab*?[]^-\\", 8), word("ab-]^", 8)
		if got, want := globMatch(p, s), globRef(p, s); got != want {
			t.Fatalf("globMatch(%q, %q) = %v, the recursive matcher says %v", p, s, got, want)
		}
	}
}

// globRef is the recursive matcher globMatch replaced: exponential on
// some patterns, a reference on short ones.
func globRef(p, s []byte) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 1 && p[1] == '*' {
				p = p[1:]
			}
			if len(p) == 1 {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if globRef(p[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
			s = s[1:]
			p = p[1:]
		case '[':
			if len(s) == 0 {
				return false
			}
			end := bytes.IndexByte(p[1:], ']')
			if end < 0 {
				return false
			}
			class := p[1 : 1+end]
			neg := len(class) > 0 && class[0] == '^'
			if neg {
				class = class[1:]
			}
			match := false
			for i := 0; i < len(class); i++ {
				if i+2 < len(class) && class[i+1] == '-' {
					if s[0] >= class[i] && s[0] <= class[i+2] {
						match = true
					}
					i += 2
				} else if class[i] == s[0] {
					match = true
				}
			}
			if match == neg {
				return false
			}
			s = s[1:]
			p = p[2+end:]
		case '\\':
			if len(p) > 1 {
				p = p[1:]
			}
			fallthrough
		default:
			if len(s) == 0 || s[0] != p[0] {
				return false
			}
			s, p = s[1:], p[1:]
		}
	}
	return len(s) == 0
}

// Pipelined SETs are queued together (one commit); their replies must come
// in order, interleaved correctly with other commands' replies, and later
// commands of the same pipeline must see them.
func TestPipelinedSetsKeepOrder(t *testing.T) {
	for _, d := range []kv.Durability{kv.Async, kv.Sync} {
		t.Run(d.String(), func(t *testing.T) { testPipelinedSetsKeepOrder(t, d) })
	}
}

func testPipelinedSetsKeepOrder(t *testing.T, d kv.Durability) {
	addr, _ := startServerWith(t, "", d)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cmds := [][]string{
		{"SET", "p1", "a"},
		{"SET", "p1", "b", "NX"}, // exists: nil
		{"SET", "p2", "c", "XX"}, // absent: nil
		{"SET", "p2", "d"},
		{"GET", "p1"},
		{"SET", "p3", "e", "EX", "0"}, // bad expiry: error, in its place
		{"SET", "p1", "f", "GET"},     // not queued: needs the prior value
		{"INCR", "n"},
		{"SET", "n", "10"},
		{"INCR", "n"},
		{"SET", "p4"}, // wrong arity
		{"SET", "p2", "g"},
		{"MGET", "p1", "p2"},
	}
	want := []string{"+OK", "$-1", "$-1", "+OK", "$1\r\na", "-ERR invalid expire time in 'set' command", "$1\r\na", ":1", "+OK", ":11",
		"-ERR wrong number of arguments for 'set' command", "+OK", "*2\r\n$1\r\nf\r\n$1\r\ng"}
	var req bytes.Buffer
	for _, c := range cmds {
		fmt.Fprintf(&req, "*%d\r\n", len(c))
		for _, a := range c {
			fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(req.Bytes()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	for i, w := range want {
		lines := strings.Count(w, "\r\n") + 1
		var got []string
		for j := 0; j < lines; j++ {
			l, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("reply %d: %v", i, err)
			}
			got = append(got, strings.TrimSuffix(l, "\r\n"))
		}
		if g := strings.Join(got, "\r\n"); g != w {
			t.Errorf("reply %d to %q: got %q, want %q", i, cmds[i], g, w)
		}
	}
}

// TestClientThatDoesNotRead: a client pipelines GETs of a large value and
// reads nothing. Its replies stop at the limit (its requests wait, the
// loop goes on serving others) and it is dropped after WriteTimeout.
func TestClientThatDoesNotRead(t *testing.T) {
	addr, s := startServerWith(t, "", kv.Async, func(s *Server) { s.WriteTimeout = time.Second })
	ctx := context.Background()
	good := redis.NewClient(&redis.Options{Addr: addr})
	defer good.Close()
	big := strings.Repeat("x", 512<<10)
	if err := good.Set(ctx, "big", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	// 2,000 GETs: 1 GiB of replies it never reads.
	go func() {
		req := []byte(strings.Repeat("*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n", 2000))
		slow.Write(req)
	}()
	for i := 0; i < 20; i++ {
		if v, err := good.Get(ctx, "big").Result(); err != nil || len(v) != len(big) {
			t.Fatalf("a good client beside the stalled one: %d bytes, %v", len(v), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Clients() > 1 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := s.Clients(); n != 1 {
		t.Fatalf("%d clients connected; the one that does not read was not dropped", n)
	}
}

// TestErrorRepliesCannotInject: an argument echoed in an error reply
// carries no CR or LF and is cut short, so it cannot forge later replies
// on the connection (reply injection).
func TestErrorRepliesCannotInject(t *testing.T) {
	addr, _ := startServer(t, "")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	evil := "x\r\n$4\r\nFAKE\r\n+"
	long := strings.Repeat("y", 10000)
	for _, args := range [][]string{{"NOSUCHCMD", evil}, {"CONFIG", evil}, {"COMMAND", evil}, {"NOSUCH" + long}, {"GET", "k"}} {
		fmt.Fprintf(c, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(c, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	r := bufio.NewReader(c)
	for i := 0; i < 4; i++ {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(line, "-ERR") || len(line) > 512 {
			t.Fatalf("reply %d: %.100q (%d bytes): want one error line of at most 512 bytes", i, line, len(line))
		}
	}
	if line, _ := r.ReadString('\n'); line != "$-1\r\n" {
		t.Fatalf("GET k after the errors: %q, want the nil reply (an injected reply took its place)", line)
	}
}

// TestExpiryArithmetic: expiry values that overflow 64-bit nanoseconds
// neither wrap to the past nor to "never": Redis keeps such keys, or
// answers ERR invalid expire time where its own milliseconds overflow.
func TestExpiryArithmetic(t *testing.T) {
	addr, _ := startServer(t, "")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	do := func(args ...any) (any, error) { return c.Do(ctx, args...).Result() }
	type step struct {
		args    []any
		want    any    // nil: don't care
		wantErr string // "": no error
	}
	for _, st := range []step{
		{[]any{"SET", "far", "v", "EX", "10000000000"}, "OK", ""},
		{[]any{"SET", "k", "v"}, "OK", ""},
		{[]any{"EXPIRE", "k", "10000000000"}, int64(1), ""},
		{[]any{"SET", "k2", "v"}, "OK", ""},
		{[]any{"EXPIRE", "k2", "9223372036854776"}, nil, "invalid expire time"},
		{[]any{"SET", "bad", "v", "EX", "9223372036854775807"}, nil, "invalid expire time"},
		{[]any{"SET", "bad", "v", "PX", "9223372036854775807"}, nil, "invalid expire time"},
		{[]any{"PEXPIRE", "k2", "9223372036854775807"}, nil, "invalid expire time"},
	} {
		got, err := do(st.args...)
		if st.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), st.wantErr) {
				t.Errorf("%v: %v %v, want an error with %q", st.args, got, err, st.wantErr)
			}
			continue
		}
		if err != nil || (st.want != nil && got != st.want) {
			t.Errorf("%v: %v %v, want %v", st.args, got, err, st.want)
		}
	}
	time.Sleep(1100 * time.Millisecond) // a wrapped expiry would have passed
	for _, k := range []string{"far", "k"} {
		ttl, err := c.TTL(ctx, k).Result()
		if err != nil || ttl < 100*365*24*time.Hour {
			t.Errorf("TTL %s: %v %v, want centuries", k, ttl, err)
		}
	}
	if v, err := c.Get(ctx, "k2").Result(); err != nil || v != "v" {
		t.Errorf("k2 after a refused EXPIRE: %q %v", v, err)
	}
	if n, _ := c.Exists(ctx, "bad").Result(); n != 0 {
		t.Errorf("a refused SET stored its key")
	}
}

// TestParseIsLinear: a request that arrives 64 KiB at a time is parsed
// in time linear in its size — 256 K arguments take about twice what
// 128 K take, not four times, and 512 K about four times, not sixteen
// (ratios from the same run: no absolute time is asserted; the check is on
// 4× the size, where the two shapes are far apart).
func TestParseIsLinear(t *testing.T) {
	request := func(n int) []byte {
		var b bytes.Buffer
		fmt.Fprintf(&b, "*%d\r\n$4\r\nMGET\r\n", n+1)
		for i := range n {
			k := strconv.Itoa(i)
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(k), k)
		}
		return b.Bytes()
	}
	lim := Limits{}.withDefaults()
	feed := func(req []byte) time.Duration {
		var p Parser
		var args [][]byte
		t0 := time.Now()
		for have := 0; ; {
			have = min(have+64<<10, len(req))
			var used int
			var err error
			args, used, err = p.Parse(req[:have], lim, args)
			if err != nil {
				t.Fatal(err)
			}
			if used > 0 {
				if used != len(req) {
					t.Fatalf("used %d of %d", used, len(req))
				}
				break
			}
		}
		return time.Since(t0)
	}
	median := func(n int) time.Duration {
		req := request(n)
		var d []time.Duration
		for range 5 {
			d = append(d, feed(req))
		}
		slices.Sort(d)
		return d[2]
	}
	small, large, larger := median(128<<10), median(256<<10), median(512<<10)
	t.Logf("128 K arguments %v, 256 K %v (%.2f×: linear 2, quadratic 4), 512 K %v (%.2f×: linear 4, quadratic 16)",
		small, large, float64(large)/float64(small), larger, float64(larger)/float64(small))
	if ratio := float64(larger) / float64(small); ratio > 8 {
		t.Fatalf("parse time grows as %.2f× for 4× the request: not linear", ratio)
	}
}

// TestIntegersAsRedis: INCR and friends read integers as Redis does, and
// say so when the result would overflow.
func TestIntegersAsRedis(t *testing.T) {
	addr, _ := startServer(t, "")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for _, tc := range []struct {
		value   string
		cmd     []any
		want    int64
		wantErr string
	}{
		{"5", []any{"INCR", "k"}, 6, ""},
		{"-5", []any{"INCR", "k"}, -4, ""},
		{"0", []any{"DECR", "k"}, -1, ""},
		{"+5", []any{"INCR", "k"}, 0, "not an integer"},
		{" 5", []any{"INCR", "k"}, 0, "not an integer"},
		{"05", []any{"INCR", "k"}, 0, "not an integer"},
		{"-0", []any{"INCR", "k"}, 0, "not an integer"},
		{"5", []any{"INCRBY", "k", "+1"}, 0, "not an integer"},
		{"9223372036854775807", []any{"INCR", "k"}, 0, "increment or decrement would overflow"},
		{"-9223372036854775808", []any{"DECR", "k"}, 0, "increment or decrement would overflow"},
		{"9223372036854775808", []any{"INCR", "k"}, 0, "not an integer"},
	} {
		if err := c.Set(ctx, "k", tc.value, 0).Err(); err != nil {
			t.Fatal(err)
		}
		got, err := c.Do(ctx, tc.cmd...).Int64()
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q %v: %d %v, want %q", tc.value, tc.cmd, got, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("%q %v: %d %v, want %d", tc.value, tc.cmd, got, err, tc.want)
		}
	}
}

// TestScanAcrossConnections: a SCAN cursor from one connection continues
// on another (pooled clients), and TYPE filters.
func TestScanAcrossConnections(t *testing.T) {
	addr, _ := startServer(t, "")
	ctx := context.Background()
	a := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	b := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer a.Close()
	defer b.Close()
	for i := range 50 {
		if err := a.Set(ctx, fmt.Sprintf("key:%02d", i), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	keys, cursor, err := a.Scan(ctx, 0, "key:*", 10).Result()
	if err != nil || cursor == 0 {
		t.Fatalf("first page: %v %d %v", keys, cursor, err)
	}
	for _, k := range keys {
		seen[k] = true
	}
	for cursor != 0 {
		var err error
		if keys, cursor, err = b.Scan(ctx, cursor, "key:*", 10).Result(); err != nil {
			t.Fatalf("the other connection continues the scan: %v", err)
		}
		for _, k := range keys {
			seen[k] = true
		}
	}
	if len(seen) != 50 {
		t.Fatalf("scan across connections saw %d of 50 keys", len(seen))
	}
	if keys, _, err := a.ScanType(ctx, 0, "", 100, "list").Result(); err != nil || len(keys) != 0 {
		t.Fatalf("SCAN TYPE list: %v %v", keys, err)
	}
	if keys, _, err := a.ScanType(ctx, 0, "", 100, "string").Result(); err != nil || len(keys) != 50 {
		t.Fatalf("SCAN TYPE string: %d keys, %v", len(keys), err)
	}
}

// TestStringCommands: the string and key commands Redis clients and tools
// send, with Redis's replies.
func TestStringCommands(t *testing.T) {
	addr, _ := startServer(t, "")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Set(ctx, "s", "Hello World", 0).Err())
	if v, _ := c.Type(ctx, "s").Result(); v != "string" {
		t.Errorf("TYPE s: %q", v)
	}
	if v, _ := c.Type(ctx, "nope").Result(); v != "none" {
		t.Errorf("TYPE nope: %q", v)
	}
	if n, _ := c.StrLen(ctx, "s").Result(); n != 11 {
		t.Errorf("STRLEN: %d", n)
	}
	for _, r := range []struct {
		start, end int64
		want       string
	}{{0, 4, "Hello"}, {-5, -1, "World"}, {-3, 100, "rld"}, {5, 3, ""}, {0, -1, "Hello World"}, {-100, 2, "Hel"}} {
		if v, _ := c.GetRange(ctx, "s", r.start, r.end).Result(); v != r.want {
			t.Errorf("GETRANGE %d %d: %q, want %q", r.start, r.end, v, r.want)
		}
	}
	if n, _ := c.Touch(ctx, "s", "nope").Result(); n != 1 {
		t.Errorf("TOUCH: %d", n)
	}
	if tm, err := c.Time(ctx).Result(); err != nil || time.Since(tm).Abs() > 5*time.Second {
		t.Errorf("TIME: %v %v", tm, err)
	}
	must(c.Do(ctx, "SETEX", "ex", "100", "v").Err())
	if ttl, _ := c.TTL(ctx, "ex").Result(); ttl <= 90*time.Second {
		t.Errorf("SETEX: TTL %v", ttl)
	}
	if ok, _ := c.SetNX(ctx, "nx", "1", 0).Result(); !ok {
		t.Error("SETNX of a new key: false")
	}
	if ok, _ := c.SetNX(ctx, "nx", "2", 0).Result(); ok {
		t.Error("SETNX of an existing key: true")
	}
	if v, _ := c.Do(ctx, "GETSET", "nx", "3").Text(); v != "1" {
		t.Errorf("GETSET: %q", v)
	}
	if v, _ := c.Get(ctx, "nx").Result(); v != "3" {
		t.Errorf("after GETSET: %q", v)
	}
	at := time.Now().Add(time.Hour).Truncate(time.Second)
	if ok, _ := c.ExpireAt(ctx, "nx", at).Result(); !ok {
		t.Error("EXPIREAT: false")
	}
	if tm, _ := c.ExpireTime(ctx, "nx").Result(); tm != time.Duration(at.Unix())*time.Second {
		t.Errorf("EXPIRETIME: %v, want %d", tm, at.Unix())
	}
	if n, _ := c.Do(ctx, "EXPIRETIME", "s").Int64(); n != -1 {
		t.Errorf("EXPIRETIME without expiry: %d", n)
	}
	if ok, _ := c.PExpireAt(ctx, "nx", time.Now().Add(-time.Second)).Result(); !ok {
		t.Error("PEXPIREAT in the past: false")
	}
	if n, _ := c.Exists(ctx, "nx").Result(); n != 0 {
		t.Error("PEXPIREAT in the past kept the key")
	}
	must(c.MSet(ctx, "user:1", "a", "user:2", "b", "other", "c").Err())
	keys, err := c.Keys(ctx, "user:*").Result()
	sort.Strings(keys)
	if err != nil || strings.Join(keys, ",") != "user:1,user:2" {
		t.Errorf("KEYS user:*: %v %v", keys, err)
	}
}

// TestRESP3ClientsFallBack: HELLO 3 is refused with NOPROTO, which RESP3
// clients take as "speak RESP2": a go-redis client asking for protocol 3
// works.
func TestRESP3ClientsFallBack(t *testing.T) {
	addr, _ := startServer(t, "")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 3})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET with a RESP3 client: %v", err)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET with a RESP3 client: %q %v", v, err)
	}
}

// TestReadModifyWrite: APPEND, SETRANGE, GETDEL and INCRBYFLOAT change a
// value atomically, keep its expiry, and answer as Redis does.
func TestReadModifyWrite(t *testing.T) {
	addr, _ := startServer(t, "")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if n, err := c.Append(ctx, "a", "Hello").Result(); err != nil || n != 5 {
		t.Fatalf("APPEND new: %d %v", n, err)
	}
	if err := c.Expire(ctx, "a", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Append(ctx, "a", " World").Result(); n != 11 {
		t.Errorf("APPEND: %d", n)
	}
	if ttl, _ := c.TTL(ctx, "a").Result(); ttl < 50*time.Minute {
		t.Errorf("APPEND lost the expiry: %v", ttl)
	}
	if n, _ := c.SetRange(ctx, "a", 6, "Redis").Result(); n != 11 {
		t.Errorf("SETRANGE: %d", n)
	}
	if v, _ := c.Get(ctx, "a").Result(); v != "Hello Redis" {
		t.Errorf("after SETRANGE: %q", v)
	}
	if n, _ := c.SetRange(ctx, "pad", 5, "x").Result(); n != 6 {
		t.Errorf("SETRANGE past the end: %d", n)
	}
	if v, _ := c.Get(ctx, "pad").Result(); v != "\x00\x00\x00\x00\x00x" {
		t.Errorf("padded: %q", v)
	}
	if n, _ := c.SetRange(ctx, "none", 0, "").Result(); n != 0 {
		t.Errorf("SETRANGE empty on a missing key: %d", n)
	}
	if n, _ := c.Exists(ctx, "none").Result(); n != 0 {
		t.Error("SETRANGE of nothing created the key")
	}
	if err := c.Do(ctx, "SETRANGE", "a", "-1", "x").Err(); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("SETRANGE -1: %v", err)
	}
	if v, err := c.GetDel(ctx, "a").Result(); err != nil || v != "Hello Redis" {
		t.Errorf("GETDEL: %q %v", v, err)
	}
	if n, _ := c.Exists(ctx, "a").Result(); n != 0 {
		t.Error("GETDEL kept the key")
	}
	if err := c.GetDel(ctx, "a").Err(); err != redis.Nil {
		t.Errorf("GETDEL of nothing: %v", err)
	}
	c.Set(ctx, "f", "10.50", 0)
	for _, step := range []struct {
		incr, want string
	}{{"0.1", "10.6"}, {"-5", "5.6"}, {"5.0e3", "5005.60000000000000009"}} { // x86 Redis's long double
		if v, err := c.Do(ctx, "INCRBYFLOAT", "f", step.incr).Text(); err != nil || v != step.want {
			t.Errorf("INCRBYFLOAT %s: %q %v, want %q", step.incr, v, err, step.want)
		}
	}
	for _, bad := range [][]any{{"INCRBYFLOAT", "f", "abc"}, {"INCRBYFLOAT", "f", "nan"}} {
		if err := c.Do(ctx, bad...).Err(); err == nil || !strings.Contains(err.Error(), "not a valid float") {
			t.Errorf("%v: %v", bad, err)
		}
	}
	// Redis 7 takes "inf" as a float (strtold does) and refuses the sum.
	if err := c.Do(ctx, "INCRBYFLOAT", "f", "inf").Err(); err == nil || !strings.Contains(err.Error(), "would produce NaN or Infinity") {
		t.Errorf("INCRBYFLOAT f inf: %v", err)
	}
	c.Set(ctx, "s", "text", 0)
	if err := c.Do(ctx, "INCRBYFLOAT", "s", "1").Err(); err == nil || !strings.Contains(err.Error(), "not a valid float") {
		t.Errorf("INCRBYFLOAT on text: %v", err)
	}
	if v, _ := c.Get(ctx, "s").Result(); v != "text" {
		t.Errorf("a refused INCRBYFLOAT changed the value: %q", v)
	}
	c.Set(ctx, "big", "1e4932", 0) // near a long double's largest
	if err := c.Do(ctx, "INCRBYFLOAT", "big", "1e4932").Err(); err == nil || !strings.Contains(err.Error(), "NaN or Infinity") {
		t.Errorf("INCRBYFLOAT to infinity: %v", err)
	}
	// Atomic under concurrency: 8 clients append 100 bytes each.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				c.Append(ctx, "many", strconv.Itoa(i))
			}
		}()
	}
	wg.Wait()
	if n, _ := c.StrLen(ctx, "many").Result(); n != 800 {
		t.Errorf("800 concurrent APPENDs of one byte: %d bytes", n)
	}
}

// TestMultiKeyCommands: RENAME, RENAMENX, COPY and MSETNX read and write
// several keys at once, atomically; values keep their expiry.
func TestMultiKeyCommands(t *testing.T) {
	addr, _ := startServer(t, "")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	c.Set(ctx, "a", "1", time.Hour)
	if err := c.Rename(ctx, "a", "b").Err(); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Get(ctx, "b").Result(); v != "1" {
		t.Errorf("after RENAME: %q", v)
	}
	if ttl, _ := c.TTL(ctx, "b").Result(); ttl < 50*time.Minute {
		t.Errorf("RENAME lost the expiry: %v", ttl)
	}
	if n, _ := c.Exists(ctx, "a").Result(); n != 0 {
		t.Error("RENAME kept the source")
	}
	if err := c.Rename(ctx, "nope", "x").Err(); err == nil || !strings.Contains(err.Error(), "no such key") {
		t.Errorf("RENAME of nothing: %v", err)
	}
	c.Set(ctx, "c", "3", 0)
	if ok, _ := c.RenameNX(ctx, "b", "c").Result(); ok {
		t.Error("RENAMENX onto an existing key: true")
	}
	if ok, _ := c.RenameNX(ctx, "b", "d").Result(); !ok {
		t.Error("RENAMENX: false")
	}
	if n, _ := c.Copy(ctx, "d", "c", 0, false).Result(); n != 0 {
		t.Error("COPY onto an existing key without REPLACE")
	}
	if n, _ := c.Copy(ctx, "d", "c", 0, true).Result(); n != 1 {
		t.Error("COPY REPLACE: 0")
	}
	if v, _ := c.Get(ctx, "c").Result(); v != "1" {
		t.Errorf("after COPY: %q", v)
	}
	if v, _ := c.Get(ctx, "d").Result(); v != "1" {
		t.Errorf("COPY's source: %q", v)
	}
	if ok, _ := c.MSetNX(ctx, "m1", "x", "m2", "y").Result(); !ok {
		t.Error("MSETNX of new keys: false")
	}
	if ok, _ := c.MSetNX(ctx, "m3", "x", "m1", "z").Result(); ok {
		t.Error("MSETNX with an existing key: true")
	}
	if n, _ := c.Exists(ctx, "m3").Result(); n != 0 {
		t.Error("a refused MSETNX set a key")
	}
}

// TestExpireConditions: EXPIRE NX, XX, GT and LT as Redis 7.
func TestExpireConditions(t *testing.T) {
	addr, _ := startServer(t, "")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	c.Set(ctx, "k", "v", 0)
	for _, st := range []struct {
		args []any
		want int64
		ttl  time.Duration // 0: no check; -1: none
	}{
		{[]any{"EXPIRE", "k", "100", "XX"}, 0, -1},
		{[]any{"EXPIRE", "k", "100", "GT"}, 0, -1},
		{[]any{"EXPIRE", "k", "100", "NX"}, 1, 100 * time.Second},
		{[]any{"EXPIRE", "k", "200", "NX"}, 0, 100 * time.Second},
		{[]any{"EXPIRE", "k", "50", "GT"}, 0, 100 * time.Second},
		{[]any{"EXPIRE", "k", "300", "GT"}, 1, 300 * time.Second},
		{[]any{"EXPIRE", "k", "400", "LT"}, 0, 300 * time.Second},
		{[]any{"EXPIRE", "k", "30", "LT"}, 1, 30 * time.Second},
		{[]any{"EXPIRE", "k", "60", "XX"}, 1, 60 * time.Second},
		{[]any{"EXPIRE", "missing", "60", "NX"}, 0, 0},
	} {
		got, err := c.Do(ctx, st.args...).Int64()
		if err != nil || got != st.want {
			t.Errorf("%v: %d %v, want %d", st.args, got, err, st.want)
		}
		if st.ttl == 0 {
			continue
		}
		ttl, _ := c.TTL(ctx, "k").Result()
		if st.ttl == -1 && ttl != -1 || st.ttl > 0 && (ttl > st.ttl || ttl < st.ttl-2*time.Second) {
			t.Errorf("after %v: TTL %v, want %v", st.args, ttl, st.ttl)
		}
	}
	if err := c.Do(ctx, "EXPIRE", "k", "10", "NX", "XX").Err(); err == nil || !strings.Contains(err.Error(), "not compatible") {
		t.Errorf("NX XX: %v", err)
	}
	if n, _ := c.Do(ctx, "EXPIRE", "k", "-1", "XX").Int64(); n != 1 {
		t.Errorf("EXPIRE -1 XX: %d", n)
	}
	if n, _ := c.Exists(ctx, "k").Result(); n != 0 {
		t.Error("a past expiry under XX kept the key")
	}
}

func TestGetEx(t *testing.T) {
	addr, _ := startServer(t, "")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	c.Set(ctx, "k", "v", 0)
	if v, err := c.GetEx(ctx, "k", 100*time.Second).Result(); err != nil || v != "v" {
		t.Fatalf("GETEX EX: %q %v", v, err)
	}
	if ttl, _ := c.TTL(ctx, "k").Result(); ttl < 98*time.Second || ttl > 100*time.Second {
		t.Errorf("after GETEX EX 100: TTL %v", ttl)
	}
	if v, _ := c.Do(ctx, "GETEX", "k", "PERSIST").Text(); v != "v" {
		t.Errorf("GETEX PERSIST: %q", v)
	}
	if ttl, _ := c.TTL(ctx, "k").Result(); ttl != -1 {
		t.Errorf("after PERSIST: TTL %v", ttl)
	}
	if err := c.Do(ctx, "GETEX", "missing").Err(); err != redis.Nil {
		t.Errorf("GETEX missing: %v", err)
	}
	if err := c.Do(ctx, "GETEX", "k", "EX", "0").Err(); err == nil || !strings.Contains(err.Error(), "invalid expire time") {
		t.Errorf("GETEX EX 0: %v", err)
	}
}

// TestMultiExecWatch: MULTI queues, EXEC runs the queue in one go, a
// command refused while queueing aborts EXEC, DISCARD drops the queue, and
// WATCH makes an EXEC run nothing when a watched key changed — so
// optimistic increments by concurrent clients lose none (go-redis's own
// Watch helper, as its documentation uses it).
func TestMultiExecWatch(t *testing.T) {
	addr, _ := startServer(t, "")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 16})
	defer c.Close()
	cmds, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "a", "1", 0)
		p.Incr(ctx, "a")
		p.Get(ctx, "a")
		return nil
	})
	if err != nil || len(cmds) != 3 || cmds[2].(*redis.StringCmd).Val() != "2" {
		t.Fatalf("MULTI SET INCR GET EXEC: %v %v", cmds, err)
	}
	// Raw: QUEUED replies, an error inside EXEC's result, EXECABORT.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	send := func(lines ...string) []string {
		t.Helper()
		for _, l := range lines {
			fmt.Fprintf(conn, "%s\r\n", l)
		}
		var out []string
		for range lines {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, strings.TrimSpace(line))
		}
		return out
	}
	if got := strings.Join(send("MULTI", "SET t text", "INCR t"), "|"); got != "+OK|+QUEUED|+QUEUED" {
		t.Fatalf("queueing: %s", got)
	}
	fmt.Fprintf(conn, "EXEC\r\n")
	var exec []string
	for range 3 {
		line, _ := r.ReadString('\n')
		exec = append(exec, strings.TrimSpace(line))
	}
	if exec[0] != "*2" || exec[1] != "+OK" || !strings.HasPrefix(exec[2], "-ERR value is not an integer") {
		t.Fatalf("EXEC with a failing command: %v", exec)
	}
	if got := strings.Join(send("MULTI", "NOSUCH", "SET t x", "EXEC"), "|"); !strings.Contains(got, "-ERR unknown command") ||
		!strings.HasSuffix(got, "-EXECABORT Transaction discarded because of previous errors.") {
		t.Fatalf("EXECABORT: %s", got)
	}
	if got := strings.Join(send("GET t"), "|"); got != "$4" {
		t.Fatalf("an aborted EXEC wrote: %s", got)
	}
	r.ReadString('\n')
	if got := strings.Join(send("MULTI", "SET t y", "DISCARD", "EXEC", "MULTI", "MULTI", "DISCARD", "WATCH t"), "|"); got !=
		"+OK|+QUEUED|+OK|-ERR EXEC without MULTI|+OK|-ERR MULTI calls can not be nested|+OK|+OK" {
		t.Fatalf("DISCARD and nesting: %s", got)
	}
	// WATCH: a change by another client empties the EXEC.
	c.Set(ctx, "t", "changed", 0)
	if got := strings.Join(send("MULTI", "SET t mine"), "|"); got != "+OK|+QUEUED" {
		t.Fatal(got)
	}
	if got := strings.Join(send("EXEC"), "|"); got != "*-1" {
		t.Fatalf("EXEC after a watched key changed: %s", got)
	}
	if v, _ := c.Get(ctx, "t").Result(); v != "changed" {
		t.Fatalf("the aborted transaction wrote: %q", v)
	}
	// Optimistic increments from 8 clients, 50 each, retried on conflict.
	const workers, each = 8, 50
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				for {
					err := c.Watch(ctx, func(tx *redis.Tx) error {
						n, err := tx.Get(ctx, "counter").Int()
						if err != nil && err != redis.Nil {
							return err
						}
						_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
							p.Set(ctx, "counter", n+1, 0)
							return nil
						})
						return err
					}, "counter")
					if err == nil {
						break
					}
					if err != redis.TxFailedErr {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if n, _ := c.Get(ctx, "counter").Int(); n != workers*each {
		t.Fatalf("optimistic increments: %d, want %d", n, workers*each)
	}
}

func TestIntrospection(t *testing.T) {
	addr, _ := startServer(t, "")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.RandomKey(ctx).Err(); err != redis.Nil {
		t.Errorf("RANDOMKEY of an empty store: %v", err)
	}
	c.Set(ctx, "n", "12345", 0)
	c.Set(ctx, "s", "short", 0)
	c.Set(ctx, "r", strings.Repeat("x", 100), 0)
	seen := map[string]bool{}
	for range 50 {
		k, err := c.RandomKey(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		seen[k] = true
	}
	for k := range seen {
		if k != "n" && k != "s" && k != "r" {
			t.Errorf("RANDOMKEY: %q", k)
		}
	}
	for k, want := range map[string]string{"n": "int", "s": "embstr", "r": "raw"} {
		if v, _ := c.ObjectEncoding(ctx, k).Result(); v != want {
			t.Errorf("OBJECT ENCODING %s: %q, want %q", k, v, want)
		}
	}
	if n, _ := c.MemoryUsage(ctx, "r").Result(); n < 101 {
		t.Errorf("MEMORY USAGE r: %d", n)
	}
	info, err := c.Info(ctx, "keyspace").Result()
	if err != nil || !strings.Contains(info, "db0:keys=3") || strings.Contains(info, "# Server") {
		t.Errorf("INFO keyspace: %q %v", info, err)
	}
	if all, _ := c.Info(ctx).Result(); !strings.Contains(all, "# Server") || !strings.Contains(all, "# Keyspace") {
		t.Errorf("INFO: %q", all)
	}
}

// TestPipelinedSetsAndGetsShareASync: in sync mode, a pipeline of 2,000
// SETs each followed by a GET (of the key just set, of another, of one
// never set, of one whose last SET was NX) gets Redis's answers in order,
// and its SETs share syncs — several SETs per sync (the committer takes
// what is queued while the server still parses), not one per SET, which
// is what a GET between them used to cost (Redis's "PIPELINING
// stresser").
func TestPipelinedSetsAndGetsShareASync(t *testing.T) {
	addr, s := startServerWith(t, "", kv.Sync)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	const pairs = 2000
	model := map[string]string{}
	p := c.Pipeline()
	var gets []*redis.StringCmd
	var want []string
	for i := range pairs {
		k, v := fmt.Sprintf("k%d", i%50), fmt.Sprintf("v%d", i)
		if i%10 == 3 {
			p.SetNX(ctx, k, v, 0) // exists after the first round: changes nothing
			if _, ok := model[k]; !ok {
				model[k] = v
			}
		} else {
			p.Set(ctx, k, v, 0)
			model[k] = v
		}
		get := fmt.Sprintf("k%d", (i*7)%60) // k50..k59 are never set
		gets = append(gets, p.Get(ctx, get))
		want = append(want, model[get])
	}
	before := s.Store.Stats().Commits
	if _, err := p.Exec(ctx); err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	commits := s.Store.Stats().Commits - before
	for i, g := range gets {
		got, err := g.Result()
		if want[i] == "" && err != redis.Nil || want[i] != "" && (err != nil || got != want[i]) {
			t.Fatalf("GET %d (%s): %q %v, want %q", i, g.Args()[1], got, err, want[i])
		}
	}
	t.Logf("%d SET/GET pairs in one pipeline: %d syncs", pairs, commits)
	if commits > pairs/4 { // the committer takes SETs while the server still parses: a few per round at least
		t.Fatalf("%d SETs with GETs between them cost %d syncs: the GETs break the group commit", pairs, commits)
	}
}

// TestClientListInfoKill: CLIENT LIST shows every connection with its id,
// address, name and last command; CLIENT INFO the caller's own line;
// CLIENT KILL ID disconnects another client (which then gets an error),
// the old form kills by address, and SKIPME no kills the caller itself.
func TestClientListInfoKill(t *testing.T) {
	addr, _ := startServer(t, "")
	ctx := context.Background()
	a := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1})
	defer a.Close()
	b := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1, ClientName: "bee"})
	defer b.Close()
	if err := b.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	bID, err := b.ClientID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	list, err := a.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(list), "\n")
	if len(lines) != 2 {
		t.Fatalf("CLIENT LIST with two clients:\n%s", list)
	}
	var bLine string
	for _, l := range lines {
		if strings.HasPrefix(l, fmt.Sprintf("id=%d ", bID)) {
			bLine = l
		}
	}
	for _, want := range []string{"name=bee", "cmd=client", "addr=127.0.0.1:", "laddr=" + addr, "flags=N", "db=0"} {
		if !strings.Contains(bLine, want) {
			t.Fatalf("b's line %q lacks %q", bLine, want)
		}
	}
	info, err := b.ClientInfo(ctx).Result()
	if err != nil || info.ID != bID || info.Name != "bee" {
		t.Fatalf("CLIENT INFO: %+v %v", info, err)
	}
	if n, err := a.ClientKillByFilter(ctx, "ID", strconv.FormatInt(bID, 10)).Result(); err != nil || n != 1 {
		t.Fatalf("CLIENT KILL ID: %d %v", n, err)
	}
	if list, _ := a.ClientList(ctx).Result(); strings.Contains(list, "name=bee") {
		t.Fatalf("the killed client is still listed:\n%s", list)
	}
	if err := a.Do(ctx, "CLIENT", "KILL", "1.2.3.4:5").Err(); err == nil || err.Error() != "ERR No such client" {
		t.Fatalf("CLIENT KILL of nobody: %v", err)
	}
	// Raw connections (go-redis would dial again behind the test's back).
	raw := func() net.Conn {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		t.Cleanup(func() { conn.Close() })
		conn.Write([]byte("PING\r\n")) // served: registered
		if l, err := bufio.NewReader(conn).ReadString('\n'); err != nil || l != "+PONG\r\n" {
			t.Fatalf("PING: %q %v", l, err)
		}
		return conn
	}
	closed := func(conn net.Conn) bool {
		conn.Write([]byte("PING\r\n"))
		buf := make([]byte, 64)
		n, err := conn.Read(buf)
		return err != nil && n == 0
	}
	c := raw()
	if err := a.Do(ctx, "CLIENT", "KILL", c.LocalAddr().String()).Err(); err != nil {
		t.Fatalf("CLIENT KILL %s: %v", c.LocalAddr(), err)
	}
	if !closed(c) {
		t.Fatal("a client killed by address still answers")
	}
	self := raw()
	self.Write([]byte("CLIENT KILL SKIPME yes MAXAGE 0\r\n"))
	br := bufio.NewReader(self)
	if l, err := br.ReadString('\n'); err != nil || l != ":1\r\n" { // a, not itself
		t.Fatalf("CLIENT KILL SKIPME yes: %q %v", l, err)
	}
	self.Write([]byte("CLIENT KILL SKIPME no MAXAGE 0\r\n"))
	if l, err := br.ReadString('\n'); err != nil || l != ":1\r\n" {
		t.Fatalf("CLIENT KILL SKIPME no: %q %v", l, err)
	}
	if _, err := br.ReadString('\n'); err == nil {
		t.Fatal("a client that killed itself was not disconnected after the reply")
	}
}

// TestPipelinedGetsDoNotAllocate: the loop serves a pipeline of GETs of
// cached keys without allocating (a per-command allocation was 6% of a
// pipelined GET's CPU). The client's side allocates nothing either: one
// prepared request buffer, replies read into one buffer of their length.
func TestPipelinedGetsDoNotAllocate(t *testing.T) {
	addr, _ := startServer(t, "")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const depth = 16
	var req, want bytes.Buffer
	for i := range depth {
		k, v := fmt.Sprintf("key:%012d", i), strings.Repeat("v", 100)
		fmt.Fprintf(&req, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(k), k)
		fmt.Fprintf(&want, "$%d\r\n%s\r\n", len(v), v)
		set := fmt.Sprintf("*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(k), k, len(v), v)
		if _, err := conn.Write([]byte(set)); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(conn, make([]byte, len("+OK\r\n"))); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, want.Len())
	round := func() {
		if _, err := conn.Write(req.Bytes()); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(conn, got); err != nil {
			t.Fatal(err)
		}
	}
	round()
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("replies:\n%q\nwant\n%q", got, want.Bytes())
	}
	// Both sides: this process is client and server. Less than one
	// allocation per round leaves room for the runtime's own (timers,
	// netpoll) and none per command.
	if n := testing.AllocsPerRun(200, round); n >= 1 {
		t.Errorf("%.1f allocations per round of %d pipelined GETs, want none per GET", n, depth)
	}
}
