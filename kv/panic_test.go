package kv

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/hecsys/hec/shared/panics"
)

// TestModifyPanicIsContained: a write whose function panics on the
// committer (a command's bug, for some argument) fails alone, with an
// error wrapping panics.ErrPanic, and applies nothing; writes in the same
// round and after it are committed as usual.
func TestModifyPanicIsContained(t *testing.T) {
	s := open(t)
	if _, err := s.Put([]byte("k"), []byte("before"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 9)
	for i := 0; i < 9; i++ {
		go func() {
			if i == 4 {
				errs <- s.Modify([]byte("k"), 1<<20, func(cur []byte, _ bool) ([]byte, bool, error) {
					panic("a bug: assignment to entry in nil map")
				})
				return
			}
			_, err := s.Put([]byte{'n', byte('0' + i)}, []byte("v"), PutOptions{})
			errs <- err
		}()
	}
	failed := 0
	for i := 0; i < 9; i++ {
		if err := <-errs; errors.Is(err, panics.ErrPanic) {
			failed++
		} else if err != nil {
			t.Errorf("a neighbour's write failed: %v", err)
		}
	}
	if failed != 1 {
		t.Fatalf("%d writes failed with the panic, want 1", failed)
	}
	if e, err := s.Get([]byte("k"), nil); err != nil || string(e.Value) != "before" {
		t.Fatalf("k after the panicking write: %q, %v; want before", e.Value, err)
	}
	for i := 0; i < 9; i++ {
		if _, err := s.Get([]byte{'n', byte('0' + i)}, nil); i != 4 && err != nil {
			t.Errorf("n%d: %v", i, err)
		}
	}
	if err := s.Modify([]byte("k"), 1<<20, func([]byte, bool) ([]byte, bool, error) { return []byte("after"), false, nil }); err != nil {
		t.Fatalf("a write after the panic: %v", err)
	}
}

// TestCommitterPanicStopsTheStore: a panic on the committer outside a
// write's function (here the write hook, which runs there) may have left
// a round half done: the store fails — that write and every later one
// get ErrFailed, the owner's hook hears once — and what was acknowledged
// before is there when the store is opened again.
func TestCommitterPanicStopsTheStore(t *testing.T) {
	dir := t.TempDir()
	var failures atomic.Int32
	s, err := Open(dir, WithWriteHook(func(key []byte) {
		if string(key) == "boom" {
			panic("a bug in the hook")
		}
	}), WithFailHook(func(err error) {
		if !errors.Is(err, ErrFailed) {
			t.Errorf("fail hook got %v", err)
		}
		failures.Add(1)
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if _, err := s.Put([]byte(k), []byte("acked"), PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Put([]byte("boom"), []byte("x"), PutOptions{}); !errors.Is(err, ErrFailed) {
		t.Fatalf("the write whose round panicked: %v, want ErrFailed", err)
	}
	if _, err := s.Put([]byte("c"), []byte("x"), PutOptions{}); !errors.Is(err, ErrFailed) {
		t.Fatalf("a write after the failure: %v, want ErrFailed", err)
	}
	if n := failures.Load(); n != 1 {
		t.Fatalf("the fail hook ran %d times, want 1", n)
	}
	s.Close()
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"a", "b"} {
		if e, err := s.Get([]byte(k), nil); err != nil || string(e.Value) != "acked" {
			t.Errorf("%s after the restart: %q, %v", k, e.Value, err)
		}
	}
}
