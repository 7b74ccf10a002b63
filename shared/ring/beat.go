package ring

import "time"

// BeatWatch tells a peer that stopped beating from one that did not get to
// run: it counts how long a heartbeat word has stood still in the time its
// watcher was there to look, a gap between two looks counting for at most
// MaxGap. A watcher that did not run for seconds (a virtual machine
// paused, a process stopped, a host starved) did not see the peer fail to
// beat either; on one machine the peer most likely did not run then too,
// and giving it up on the first look after would take a live agent, or a
// live holder, for dead. MaxGap at or above the usual time between looks
// leaves normal detection as it was.
//
// The zero value starts watching at its first look.
type BeatWatch struct {
	Timeout time.Duration // still this long: the peer is taken for dead
	MaxGap  time.Duration // the most one gap between looks counts (0: all of it)

	beat   uint64
	still  time.Duration
	looked time.Time
}

// Reset starts watching afresh: beat seen at now.
func (w *BeatWatch) Reset(now time.Time, beat uint64) {
	w.beat, w.still, w.looked = beat, 0, now
}

// Look records the beat seen at now and returns how long it has stood
// still, in counted time, and whether that is past Timeout.
func (w *BeatWatch) Look(now time.Time, beat uint64) (still time.Duration, dead bool) {
	if w.looked.IsZero() || beat != w.beat {
		w.Reset(now, beat)
		return 0, false
	}
	gap := max(now.Sub(w.looked), 0)
	if w.MaxGap > 0 {
		gap = min(gap, w.MaxGap)
	}
	w.still += gap
	w.looked = now
	return w.still, w.still > w.Timeout
}
