package main

import (
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// barFrom is the size from which a transfer shows a progress bar.
const barFrom = 64 << 20

// newBar returns a progress bar over size bytes on the terminal (stderr),
// or nil for work under barFrom bytes or elsewhere (a pipe).
func newBar(what string, size int64) *progressbar.ProgressBar {
	if size < barFrom || !term.IsTerminal(int(os.Stderr.Fd())) {
		return nil
	}
	return progressbar.NewOptions64(size, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription(what),
		progressbar.OptionShowBytes(true), progressbar.OptionClearOnFinish(), progressbar.OptionThrottle(100*time.Millisecond))
}

// progress is a progress callback (done of total bytes) that shows a bar
// for large work on the terminal, made at its first call; finish ends it.
func progress(what string) (update func(done, total int64), finish func()) {
	var bar *progressbar.ProgressBar
	made := false
	return func(done, total int64) {
			if !made {
				bar, made = newBar(what, total), true
			}
			if bar != nil {
				bar.Set64(done)
			}
		}, func() {
			if bar != nil {
				bar.Finish()
			}
		}
}

// transferBar returns a progress bar over the bytes of f on the terminal
// (stderr), for large files; elsewhere (a pipe, a small file) one that
// shows nothing.
func transferBar(f *os.File, what string) *progressbar.ProgressBar {
	if fi, err := f.Stat(); err == nil {
		if bar := newBar(what, fi.Size()); bar != nil {
			return bar
		}
	}
	return progressbar.DefaultBytesSilent(-1, what)
}
