package dpu

import (
	"testing"

	"github.com/hecsys/hec/shared/ring"
)

// TestWorkQueueIsFair: with two workers busy on a pair that floods the
// queue, another pair's job goes to the next worker that frees, not behind
// the flood; a FIFO would have served it after the flood's queue.
func TestWorkQueueIsFair(t *testing.T) {
	g := ring.Geometry{QueuePairs: 3, Entries: 64, WindowSize: 4096}
	size, _ := g.Size()
	a, err := ring.Format(ring.NewHeapRegion(size), ring.AgentConfig{Geometry: g})
	if err != nil {
		t.Fatal(err)
	}
	qps := a.QueuePairs()
	flood, other, third := qps[0], qps[1], qps[2]
	q := newWorkQueue()
	mk := func(p *ring.AgentQP, tag uint64) *job {
		j := &job{q: p}
		j.req.Tag = tag
		return j
	}
	for i := range 10 {
		q.push(mk(flood, uint64(i)))
	}
	// Two workers take the flood's first two jobs.
	w1, w2 := q.pop(), q.pop()
	if w1.q != flood || w2.q != flood {
		t.Fatal("workers did not start on the flood")
	}
	q.push(mk(other, 100))
	q.done(flood.Index()) // the first worker frees
	if j := q.pop(); j.q != other {
		t.Fatalf("next job from pair %d (tag %d), want the other pair's", j.q.Index(), j.req.Tag)
	}
	// Two flooding pairs and an occasional one: the occasional pair's
	// job still goes to the first worker that frees.
	for i := range 5 {
		q.push(mk(third, uint64(200+i)))
	}
	q.done(flood.Index())
	q.done(other.Index())
	if a, b := q.pop(), q.pop(); a.q == b.q {
		t.Fatalf("two floods, two workers: both took pair %d", a.q.Index())
	}
	q.push(mk(other, 101))
	q.done(third.Index())
	if j := q.pop(); j.q != other {
		t.Fatalf("next job from pair %d, want the occasional pair's", j.q.Index())
	}
	// Jobs of one pair keep their order.
	var last uint64
	for range 3 {
		q.done(flood.Index())
		j := q.pop()
		if j.q == flood {
			if j.req.Tag < last {
				t.Fatalf("tag %d after %d", j.req.Tag, last)
			}
			last = j.req.Tag
		}
	}
	if n := len(q.drop()); n == 0 {
		t.Fatal("nothing left to drop")
	}
	q.close()
	if q.pop() != nil {
		t.Fatal("pop after close returned a job")
	}
}
