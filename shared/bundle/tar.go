package bundle

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hecsys/hec/shared/durable"
)

// Errors of Unpack, checked with errors.Is.
var (
	ErrTooLarge  = errors.New("bundle: larger than the limit")
	ErrBadUpload = errors.New("bundle: the upload is not a bundle archive")
)

// maxParts bounds the files of an upload.
const maxParts = 16

// Unpack writes the files of a tar stream into dir (flat: plain names
// only, regular files only, at most max bytes in all), each synced. It
// does not verify anything: Verify does, on the result.
func Unpack(r io.Reader, dir string, max int64) error {
	tr := tar.NewReader(r)
	var total int64
	for n := 0; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			if n == 0 {
				return fmt.Errorf("%w: an empty archive", ErrBadUpload)
			}
			return durable.SyncDir(dir)
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadUpload, err)
		}
		if n >= maxParts {
			return fmt.Errorf("%w: more than %d files", ErrBadUpload, maxParts)
		}
		if h.Typeflag != tar.TypeReg || !PlainName(h.Name) {
			return fmt.Errorf("%w: entry %q is not a plain file", ErrBadUpload, h.Name)
		}
		if h.Size < 0 || total+h.Size > max {
			return fmt.Errorf("%w (%d bytes)", ErrTooLarge, max)
		}
		total += h.Size
		if err := writeSynced(filepath.Join(dir, h.Name), tr, h.Size); err != nil {
			return err
		}
	}
}

func writeSynced(path string, r io.Reader, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o700)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadUpload, err)
	}
	if n, err := io.Copy(f, io.LimitReader(r, size)); err != nil || n != size {
		f.Close()
		return fmt.Errorf("%w: %s: %d of %d bytes: %v", ErrBadUpload, filepath.Base(path), n, size, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Pack writes the bundle in dir as the tar stream Unpack reads (what
// `hecctl flash` uploads).
func Pack(w io.Writer, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, e := range entries {
		if !e.Type().IsRegular() || !PlainName(e.Name()) {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		fi, err := f.Stat()
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Name: e.Name(), Mode: 0o644, Size: fi.Size(), Typeflag: tar.TypeReg})
		}
		if err == nil {
			_, err = io.Copy(tw, f)
		}
		f.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}
