package resp

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startRedis starts redis-server (no persistence) on a free port and
// returns its address; the test skips when redis-server is missing.
func startRedis(t *testing.T) string {
	t.Helper()
	addr, stop, err := launchRedis(t.TempDir())
	if errors.Is(err, exec.ErrNotFound) {
		t.Skip("redis-server not installed (make test installs redis-server as root)")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr
}

// launchRedis starts redis-server in dir; it dies with this process, if
// not stopped before.
func launchRedis(dir string) (addr string, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--loglevel", "warning")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() { cmd.Process.Kill(); cmd.Wait() }
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr, stop, nil
		}
		if i == 200 {
			stop()
			return "", nil, fmt.Errorf("redis-server does not listen on %s", addr)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// session runs lines through one redis-cli (one connection, replies
// formatted as a user sees them) and returns one reply per line.
func session(t *testing.T, cli, addr string, lines []string) []string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	var replies []string
	// One redis-cli per line would lose MULTI's connection; one for all
	// prints replies that cannot be told apart. So: one per line, except
	// that lines joined by " ;; " run in one.
	for _, l := range lines {
		cmds := strings.Split(l, " ;; ")
		cmd := exec.Command(cli, "--no-raw", "-h", host, "-p", port)
		cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %q against %s: %v %s", l, addr, err, out)
		}
		replies = append(replies, strings.TrimSpace(string(out)))
	}
	return replies
}

// TestSameAnswersAsRedis runs one redis-cli session — every string, key,
// expiry, transaction and introspection command hecd serves — against
// hecd and against redis-server 7 started here, and compares the replies:
// equal, or, where the value cannot be (times, ids, sizes, addresses),
// of the same shape.
func TestSameAnswersAsRedis(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not installed (make test installs redis-tools as root)")
	}
	redisAddr := startRedis(t)
	hecAddr, _ := startServer(t, "")
	exact := []string{
		"FLUSHALL", "SET s hello", "TYPE s", "TYPE nosuch", "STRLEN s", "STRLEN nosuch", `APPEND s " world"`,
		"GETRANGE s 0 4", "GETRANGE s -5 -1", "GETRANGE s 100 200", "SETRANGE s 6 Redis", "GET s", "SETRANGE z 3 x", "GET z",
		"SETNX s x", "SETNX n1 10", "GETSET n1 11", "GETSET nosuch 1", "GETDEL n1", "GETDEL n1",
		"SETEX e 100 v", "TTL e", "SETEX e 0 v", "SETEX e -1 v", "PSETEX pe 100000 v", "PTTL nosuch",
		"GETEX s EX 100", "TTL s", "GETEX s PERSIST", "TTL s", "GETEX nosuch", "GETEX s EX 0", "GETEX s PX 1 EX 1",
		"MSETNX m1 a m2 b", "MSETNX m2 c m3 d", "MGET m1 m2 m3", "MSETNX m1",
		"SET f 10.5", "INCRBYFLOAT f 0.1", "INCRBYFLOAT f 5.0e3", "INCRBYFLOAT s 1", "INCRBYFLOAT f abc", "INCRBYFLOAT nf 3",
		"SET g 3.0e3", "INCRBYFLOAT g 1.5", "INCRBYFLOAT g -3001.5", "INCRBYFLOAT g 1e400", "INCRBYFLOAT g 0x10", "INCRBYFLOAT g ' 1'", "SET h 1e4932", "INCRBYFLOAT h 1e4932", "INCRBYFLOAT h -1e4932",
		"RENAME m1 r1", "RENAME nosuch r2", "RENAMENX r1 m2", "RENAMENX r1 r9", "RENAMENX r9 r9", "GET r9",
		"COPY r9 c1", "COPY r9 c1", "COPY r9 c1 REPLACE", "GET c1", // (COPY … DB 1: hecd serves one database)
		"TOUCH r9 c1 nosuch",
		"EXPIREAT r9 4102444800", "EXPIRETIME r9", "PEXPIRETIME r9", "PEXPIREAT c1 4102444800000", "PEXPIRETIME c1", "EXPIRETIME c1",
		"EXPIRETIME nosuch", "EXPIRETIME s",
		"SET p v PXAT 4102444800123", "PEXPIRETIME p", "EXPIRETIME p", "PEXPIREAT p 4102444800999", "PEXPIRETIME p",
		"GETEX p PXAT 4102444801001", "PEXPIRETIME p", "SET q v EXAT 4102444800", "PEXPIRETIME q", "SET q v PXAT 1", "GET q",
		"SETEX e 100 v ;; TTL e", "PSETEX e 1999 v ;; TTL e", "PSETEX e 1499 v ;; TTL e",
		"SET s v", "EXPIRE s 100 XX", "EXPIRE s 100 NX", "EXPIRE s 50 GT", "EXPIRE s 200 GT", "TTL s", "EXPIRE s 300 LT",
		"EXPIRE s 100 LT", "TTL s", "EXPIRE s 10 NX XX", "EXPIRE s 10 GT LT", "EXPIRE s 10 BOGUS", "PERSIST s", "EXPIRE s 10 GT",
		"KEYS m3", "KEYS nomatch*",
		"SET k v EX 10000000000000000", "SET k v PX 9223372036854775807", "EXPIRE s 9223372036854776", "GET s",
		"INCR s", "SET i +5", "INCR i", "SET i 05", "INCR i", "SET big 9223372036854775807", "INCR big", "DECRBY big -1",
		"OBJECT ENCODING big", "OBJECT ENCODING s", "OBJECT ENCODING nosuch",
		"MULTI ;; SET t1 a ;; APPEND t1 b ;; GET t1 ;; EXEC",
		"MULTI ;; SET t2 x ;; DISCARD ;; GET t2",
		"DISCARD", "EXEC", "MULTI ;; MULTI ;; DISCARD",
		"WATCH w ;; SET w changed ;; MULTI ;; SET w 1 ;; EXEC ;; GET w",
		"WATCH w ;; UNWATCH ;; SET w again ;; MULTI ;; SET w 2 ;; EXEC",
		"MULTI ;; BADCMD ;; SET q 1 ;; EXEC ;; GET q",
		"MULTI ;; SET q ;; EXEC",
		"CLIENT SETNAME me ;; RESET ;; CLIENT GETNAME",
		"CLIENT KILL ID 999999", "CLIENT KILL 1.2.3.4:5", "CLIENT KILL ID 0", "CLIENT KILL USER nobody",
		"CLIENT LIST ID abc", "CLIENT NOSUCH",
		"NOSUCHCMD a b", `GET "x` + "\x01" + `y"`,
		"FLUSHDB", "DBSIZE", "RANDOMKEY", "SET only 1", "RANDOMKEY", "FLUSHALL ASYNC", "KEYS *",
		// Redis's own "SETRANGE with huge offset", which killed hecd (issue
		// 58), and the same boundaries for every command with an offset,
		// a length, a count or a time.
		"SET s hello", "SETRANGE k 9223372036854775807 x", "SETRANGE k 9223372036854775806 xy", "SETRANGE s 536870911 xy",
		"SETRANGE s 536870912 x", "SETRANGE s -1 x", "SETRANGE s 9223372036854775808 x", "GET s", "EXISTS k",
		"GETRANGE s 0 9223372036854775807", "GETRANGE s -9223372036854775808 -1", "GETRANGE s 9223372036854775807 0",
		"GETRANGE s -9223372036854775808 9223372036854775807", "GETRANGE s 0 9223372036854775808",
		"SET n 1", "INCRBY n 9223372036854775807", "INCRBY n 9223372036854775806", "DECRBY n -9223372036854775808",
		"SET m -9223372036854775808", "DECRBY m 1", "DECR m", "INCRBY m -1", "DECRBY m 9223372036854775807",
		"INCRBY n 9223372036854775808", "INCRBYFLOAT n 1e308", "SET fl 1e308", "INCRBYFLOAT fl 1e308", "INCRBYFLOAT fl inf",
		"EXPIRE s 9223372036854775807", "PEXPIRE s 9223372036854775807", "EXPIREAT s 9223372036854775807",
		"PEXPIREAT s 9223372036854775807", "EXPIRE s -9223372036854775808", "PEXPIRE s -9223372036854775808",
		"SET s hello", "GETEX s EX 9223372036854775807", "GETEX s PX 9223372036854775807", "GETEX s EXAT 9223372036854775807",
		"GETEX s PXAT 9223372036854775807", "GETEX s EX -1", "SET s v EX 9223372036854775807", "SET s v PX -9223372036854775808",
		"SET s v EXAT 9223372036854775807", "SET s v PXAT 9223372036854775807", "SETEX s 9223372036854775807 v",
		"PSETEX s 9223372036854775807 v", "GET s", "SCAN 0 COUNT 0", "SCAN 0 COUNT -1", "SCAN 18446744073709551616",
		"SET fi 1", "INCRBYFLOAT fi -inf", "INCRBYFLOAT fi Infinity", "SET fi inf", "INCRBYFLOAT fi -inf", "INCRBYFLOAT fi nan",
		// Deliberately not as Redis (README): SCAN's cursor is hecd's own, so
		// a number it did not give ("SCAN -1", "SCAN 18446744073709551615")
		// is "ERR invalid cursor"; SCAN's order is the store's.
	}
	hec := session(t, cli, hecAddr, exact)
	red := session(t, cli, redisAddr, exact)
	for i, l := range exact {
		if hec[i] != red[i] {
			t.Errorf("%q:\n  hecd:  %q\n  redis: %q", l, hec[i], red[i])
		}
	}

	// Replies whose values differ by nature: compared by shape.
	integer := regexp.MustCompile(`^\(integer\) \d+$`)
	shapes := []struct {
		line string
		ok   func(string) bool
	}{
		{"TIME", regexp.MustCompile(`^1\) "\d{10}"\n2\) "\d{1,6}"$`).MatchString},
		{"SET u 12345 ;; MEMORY USAGE u", func(s string) bool { return integer.MatchString(strings.Split(s, "\n")[1]) }},
		{"SET u 1 EX 100 ;; PTTL u", func(s string) bool {
			n, err := strconv.Atoi(strings.TrimPrefix(strings.Split(s, "\n")[1], "(integer) "))
			return err == nil && n > 99_000 && n <= 100_000
		}},
		{"SET u 1 PX 1500 ;; PTTL u", func(s string) bool {
			n, err := strconv.Atoi(strings.TrimPrefix(strings.Split(s, "\n")[1], "(integer) "))
			return err == nil && n > 1_400 && n <= 1_500
		}},
		{"CLIENT SETNAME who ;; CLIENT INFO", regexp.MustCompile(`^OK\nid=\d+ addr=127\.0\.0\.1:\d+ laddr=127\.0\.0\.1:\d+ fd=\d+ name=who age=\d+ idle=\d+ flags=N db=0 .*cmd=client\|info user=default .*resp=2`).MatchString},
		{"CLIENT LIST", regexp.MustCompile(`^id=\d+ addr=127\.0\.0\.1:\d+ .*name= .*cmd=client\|list .*resp=2`).MatchString},
		{"INFO server", func(s string) bool { return strings.Contains(s, "# Server") && strings.Contains(s, "redis_version:") }},
		{"INFO keyspace", func(s string) bool { return strings.Contains(s, "# Keyspace") }},
		{"COMMAND INFO get", func(s string) bool { return strings.Contains(s, `"get"`) && strings.Contains(s, "readonly") }},
		{"COMMAND COUNT", integer.MatchString},
	}
	lines := make([]string, len(shapes))
	for i, s := range shapes {
		lines[i] = s.line
	}
	for _, who := range []struct{ name, addr string }{{"hecd", hecAddr}, {"redis", redisAddr}} {
		for i, out := range session(t, cli, who.addr, lines) {
			if !shapes[i].ok(out) {
				t.Errorf("%s: %q: %q is not of the expected shape", who.name, shapes[i].line, out)
			}
		}
	}

	// What hecd does not serve (README): Redis's unknown-command error.
	for _, l := range []string{"XADD x * f v", "BLPOP l 0", "SORT l", "ZUNIONSTORE d 1 z", "PUBLISH c m", "EVAL x 0"} {
		got := session(t, cli, hecAddr, []string{l})[0]
		if !strings.HasPrefix(got, "(error) ERR unknown command '"+strings.Fields(l)[0]+"'") {
			t.Errorf("hecd %q: %q, want Redis's unknown-command error", l, got)
		}
	}
}
