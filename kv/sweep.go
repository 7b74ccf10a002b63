package kv

import (
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// Active expiry. Badger never drops a key whose expiry is in milliseconds
// (see expiryMs), so the store does, as Redis does beside its lazy
// expiry: once a second, when any write since the store opened set an
// expiry, the sweeper walks the next sweepBatch keys from where it
// stopped (keys only: the expiry is in Badger's key metadata) and deletes
// those expired, through the committer, so they are logged, and the read
// cache and the write hook hear of it. A store whose writes set no expiry
// only wakes once a second to look at a flag.

const (
	sweepEvery = time.Second
	sweepBatch = 4096
)

// sweeper runs until stop is closed.
func (s *Store) sweeper(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	var cursor []byte
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if s.commit.hasTTL.Load() {
			cursor = s.sweep(cursor, sweepBatch)
		}
	}
}

// sweep deletes the expired keys among up to n keys from cursor and
// returns where the next sweep starts (nil: from the first key again).
func (s *Store) sweep(cursor []byte, n int) (next []byte) {
	var dead [][]byte
	now := nowMs()
	s.view(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.PrefetchValues = false
		it := txn.NewIterator(o)
		defer it.Close()
		i := 0
		for it.Seek(cursor); it.Valid() && i < n; it.Next() {
			item := it.Item()
			if expired(item.ExpiresAt(), now) {
				dead = append(dead, item.KeyCopy(nil))
			}
			i++
		}
		if it.Valid() {
			next = it.Item().KeyCopy(nil)
		}
		return nil
	})
	if len(dead) == 0 {
		return next
	}
	var size int64
	for _, k := range dead {
		size += entrySize(k, nil)
	}
	s.update(dead, size, int64(len(dead)), func(txn *wtxn) error {
		for _, k := range dead { // expired still: not written again meanwhile
			if item, err := txn.Txn.Get(k); err == nil && expired(item.ExpiresAt(), nowMs()) {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return next
}
