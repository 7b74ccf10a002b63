package images

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// File is one entry of an initramfs.
type File struct {
	Path string // without leading slash, e.g. "init", "lib/modules/x.ko"
	Mode uint32 // permission bits; directories and symlinks are typed below
	Dir  bool
	Link string // symlink target
	Data []byte
}

// WriteCPIO writes files as a reproducible newc archive: sorted by path,
// parent directories implied, mtime, uid and gid zero, inode numbers in
// order. The same files give the same bytes.
func WriteCPIO(w io.Writer, files []File) error {
	all := map[string]File{}
	for _, f := range files {
		p := strings.Trim(f.Path, "/")
		if p == "" || strings.Contains(p, "..") {
			return fmt.Errorf("cpio: bad path %q", f.Path)
		}
		f.Path = p
		all[p] = f
		for d := p; strings.Contains(d, "/"); {
			d = d[:strings.LastIndex(d, "/")]
			if _, ok := all[d]; !ok {
				all[d] = File{Path: d, Dir: true, Mode: 0o755}
			}
		}
	}
	paths := make([]string, 0, len(all))
	for p := range all {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	cw := &countWriter{w: w}
	for i, p := range paths {
		f := all[p]
		mode := f.Mode & 0o7777
		var data []byte
		switch {
		case f.Dir:
			mode |= 0o040000
		case f.Link != "":
			mode |= 0o120000
			data = []byte(f.Link)
		default:
			mode |= 0o100000
			data = f.Data
		}
		nlink := 1
		if f.Dir {
			nlink = 2
		}
		if err := writeEntry(cw, uint32(i+1), mode, uint32(nlink), p, data); err != nil {
			return err
		}
	}
	if err := writeEntry(cw, 0, 0, 1, "TRAILER!!!", nil); err != nil {
		return err
	}
	// Pad the archive to a 512-byte block, as cpio(1) does.
	if pad := (512 - cw.n%512) % 512; pad > 0 {
		_, err := cw.Write(make([]byte, pad))
		return err
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func pad4(w *countWriter) error {
	if p := (4 - w.n%4) % 4; p > 0 {
		_, err := w.Write(make([]byte, p))
		return err
	}
	return nil
}

func writeEntry(w *countWriter, ino, mode, nlink uint32, name string, data []byte) error {
	// newc header: magic and 13 eight-digit hex fields.
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	if _, err := io.WriteString(w, hdr+name+"\x00"); err != nil {
		return err
	}
	if err := pad4(w); err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return err
	}
	return pad4(w)
}
