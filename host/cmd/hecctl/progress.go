package main

import (
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// barFrom is the size from which a transfer shows a progress bar.
const barFrom = 64 << 20

// transferBar returns a progress bar over the bytes of f on the terminal
// (stderr), for large files; elsewhere (a pipe, a small file) one that
// shows nothing.
func transferBar(f *os.File, what string) *progressbar.ProgressBar {
	fi, err := f.Stat()
	if err != nil || fi.Size() < barFrom || !term.IsTerminal(int(os.Stderr.Fd())) {
		return progressbar.DefaultBytesSilent(-1, what)
	}
	return progressbar.NewOptions64(fi.Size(), progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription(what),
		progressbar.OptionShowBytes(true), progressbar.OptionClearOnFinish(), progressbar.OptionThrottle(100*time.Millisecond))
}
