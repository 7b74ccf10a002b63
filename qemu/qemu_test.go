package qemu

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNotReadySaysWhereTheBootStuck: the first line of the error of a VM
// that did not become ready (all a one-line tool such as hecctl prints)
// names the last boot stage and the console's last line; the tail of the
// console follows.
func TestNotReadySaysWhereTheBootStuck(t *testing.T) {
	initLines := `time=T level=INFO msg=init kernel="6.1.0-57-arm64 aarch64"` + "\n" +
		`time=T level=INFO msg="init done" took=539ms` + "\n"
	for _, tc := range []struct {
		name, console string
		stage         string // in the first line
		last          string // the console's last line, in the first line
	}{
		{"nothing yet", "", "the console shows no boot stage yet", `""`},
		{"kernel only", "[    0.0] Booting Linux on physical CPU 0x0\r\n[    1.2] Run /init as init process\r\n",
			"no boot stage", `"[    1.2] Run /init as init process"`},
		{"init done", initLines, "it got as far as: network, state disk and region ready: starting the agent", `took=539ms"`},
		{"agent started", initLines + `time=T level=INFO msg="agent started" pid=98` + "\n" + "time=T level=INFO msg=\"opening the store\"\n\n",
			"it got as far as: the agent is starting its services", `msg=\"opening the store\""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			console := filepath.Join(t.TempDir(), "console.log")
			if err := os.WriteFile(console, []byte(tc.console), 0o644); err != nil {
				t.Fatal(err)
			}
			var progress bytes.Buffer
			s := &bootStages{console: console, w: &progress}
			s.poll()
			s.poll() // each stage is told once
			cause := errors.New("no /readyz within 1m0s")
			err := notReady("vm-x", console, s.reached(), []byte(tc.console), cause)
			if !errors.Is(err, cause) {
				t.Errorf("error does not wrap its cause: %v", err)
			}
			first, rest, _ := strings.Cut(err.Error(), "\n")
			for _, want := range []string{"VM vm-x not ready: no /readyz within 1m0s", tc.stage, tc.last, console} {
				if !strings.Contains(first, want) {
					t.Errorf("first line %q lacks %q", first, want)
				}
			}
			if !strings.Contains(rest, strings.TrimSpace(tc.console)) {
				t.Errorf("the console's tail is not after the first line:\n%s", rest)
			}
			if n := strings.Count(progress.String(), "qemu: "); s.next != n {
				t.Errorf("%d stages reached, %d told:\n%s", s.next, n, progress.String())
			}
		})
	}
}

// TestNotReadyCutsALongConsole: a console of megabytes (a guest that
// logs in a loop) gives an error of bounded size, and a last line of
// bounded length.
func TestNotReadyCutsALongConsole(t *testing.T) {
	text := []byte(strings.Repeat("x", 1<<20) + "\n" + strings.Repeat("y", 1<<20))
	err := notReady("vm-x", "/c", "", text, errors.New("qemu exited"))
	if n := len(err.Error()); n > 3000 {
		t.Errorf("error of %d bytes", n)
	}
	first, _, _ := strings.Cut(err.Error(), "\n")
	if len(first) > 500 {
		t.Errorf("first line of %d bytes", len(first))
	}
}
