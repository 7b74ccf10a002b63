package kv

import (
	"errors"
	"testing"
	"time"
)

// putKind stores value under key as kind k, as the RESP front end's
// typed commands do.
func putKind(t *testing.T, s *Store, key string, k Kind, value string) {
	t.Helper()
	err := s.Update([][]byte{[]byte(key)}, len(value), func(c []Cell) error {
		c[0].Value, c[0].Kind, c[0].Write = []byte(value), k, true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestKindsKeepToThemselves: a typed value is never handed to a caller
// that reads strings, keeps its kind through expiry changes, scans and a
// reopen, and a plain Put replaces it.
func TestKindsKeepToThemselves(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	k := []byte("l")
	putKind(t, s, "l", KindList, "encoded")

	if _, err := s.Get(k, nil); !errors.Is(err, ErrWrongType) {
		t.Errorf("Get of a list: %v, want ErrWrongType", err)
	}
	if e, err := s.Lookup(k, nil); err != nil || e.Kind != KindList || string(e.Value) != "encoded" {
		t.Errorf("Lookup: %+v %v", e, err)
	}
	if err := s.Modify(k, 10, func([]byte, bool) ([]byte, bool, error) {
		t.Error("Modify called f on a list")
		return nil, false, nil
	}); !errors.Is(err, ErrWrongType) {
		t.Errorf("Modify of a list: %v", err)
	}
	if _, err := s.IncrBy(k, 1); !errors.Is(err, ErrWrongType) {
		t.Errorf("IncrBy of a list: %v", err)
	}
	if _, err := s.Put(k, []byte("x"), PutOptions{ReturnPrior: true}); !errors.Is(err, ErrWrongType) {
		t.Errorf("GETSET of a list: %v", err)
	}
	if err := s.CompareAndSwap(k, []byte("encoded"), []byte("x")); !errors.Is(err, ErrMismatch) {
		t.Errorf("CompareAndSwap of a list: %v", err)
	}
	if ok, err := s.Expire(k, time.Hour); !ok || err != nil {
		t.Fatalf("Expire: %v %v", ok, err)
	}
	if e, err := s.Lookup(k, nil); err != nil || e.Kind != KindList || e.ExpiresAt.IsZero() {
		t.Errorf("after Expire: %+v %v", e, err)
	}
	page, _, err := s.Scan(nil, nil, 10, false)
	if err != nil || len(page) != 1 || page[0].Kind != KindList {
		t.Errorf("Scan: %+v %v", page, err)
	}

	s.Close()
	if s, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	if e, err := s.Lookup(k, nil); err != nil || e.Kind != KindList || string(e.Value) != "encoded" {
		t.Errorf("after reopen: %+v %v", e, err)
	}
	if _, err := s.Put(k, []byte("plain"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if e, err := s.Get(k, nil); err != nil || string(e.Value) != "plain" {
		t.Errorf("after SET over a list: %+v %v", e, err)
	}
}

func TestKindNames(t *testing.T) {
	for k := KindString; k <= maxKind; k++ {
		if got, ok := ParseKind(k.String()); !ok || got != k {
			t.Errorf("ParseKind(%q) = %v %v", k.String(), got, ok)
		}
	}
	if _, ok := ParseKind("stream"); ok {
		t.Error("ParseKind(stream): a kind the store does not keep")
	}
}
