package dpu

import (
	"sync"
	"time"
)

// workQueue holds the jobs handed to the worker pool, one FIFO per queue
// pair, and hands them out fairly: a free worker takes the oldest job of
// the pair with the fewest jobs running, and among those the pair served
// least recently. A pair that floods the agent with costly descriptors
// therefore cannot make another pair's job wait behind its queue. Nor
// behind the jobs already running: a long job yields every slice
// (Request.Yield, every YieldEvery bytes), and its worker then serves the
// job of a pair that has nothing running (preempt) before it goes on. So a
// pair's lone job waits for at most one slice of another pair's work
// (wire.MaxTouch bounds the whole of one descriptor's).
type workQueue struct {
	mu      sync.Mutex
	cond    sync.Cond
	pairs   []*pairQueue // by queue pair index, grown on demand
	waiting []*pairQueue // pairs with jobs queued
	starts  uint64       // jobs started, all pairs
	idle    int          // workers waiting in pop
	closed  bool

	loneWaitMax time.Duration
}

type pairQueue struct {
	jobs      []*job
	head      int
	running   int
	lastStart uint64 // starts when this pair last started a job
	waiting   bool
}

func newWorkQueue() *workQueue {
	q := &workQueue{}
	q.cond.L = &q.mu
	return q
}

func (q *workQueue) pair(i int) *pairQueue {
	for len(q.pairs) <= i {
		q.pairs = append(q.pairs, &pairQueue{})
	}
	return q.pairs[i]
}

// push queues j for its pair.
func (q *workQueue) push(j *job) {
	q.mu.Lock()
	p := q.pair(j.q.Index())
	j.queued, j.lone = time.Now(), p.running == 0 && p.head == len(p.jobs)
	p.jobs = append(p.jobs, j)
	if !p.waiting {
		p.waiting = true
		q.waiting = append(q.waiting, p)
	}
	q.mu.Unlock()
	q.cond.Signal()
}

// pop waits for a job and takes the fairest one; nil once closed.
func (q *workQueue) pop() *job {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.idle++
	for len(q.waiting) == 0 && !q.closed {
		q.cond.Wait()
	}
	q.idle--
	if q.closed {
		return nil
	}
	return q.take(q.fairest())
}

// fairest returns the index in q.waiting of the pair whose job goes next:
// the fewest jobs running, then the least recently served. With q.mu held
// and q.waiting not empty.
func (q *workQueue) fairest() int {
	best := 0
	for i, p := range q.waiting[1:] {
		b := q.waiting[best]
		if p.running < b.running || p.running == b.running && p.lastStart < b.lastStart {
			best = i + 1
		}
	}
	return best
}

// preempt is called by a worker between slices of a long job: while no
// worker is idle, it returns the job of the fairest waiting pair if that
// pair has nothing running, for the worker to serve before it goes on;
// nil otherwise.
func (q *workQueue) preempt() *job {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.idle > 0 || q.closed || len(q.waiting) == 0 {
		return nil
	}
	if best := q.fairest(); q.waiting[best].running == 0 {
		return q.take(best)
	}
	return nil
}

// take starts the head job of q.waiting[i]. With q.mu held.
func (q *workQueue) take(best int) *job {
	p := q.waiting[best]
	j := p.jobs[p.head]
	p.jobs[p.head] = nil
	p.head++
	if p.head == len(p.jobs) {
		p.jobs, p.head = p.jobs[:0], 0
		p.waiting = false
		q.waiting = append(q.waiting[:best], q.waiting[best+1:]...)
	}
	q.starts++
	p.lastStart = q.starts
	p.running++
	j.waited = time.Since(j.queued)
	if j.lone && j.waited > q.loneWaitMax {
		q.loneWaitMax = j.waited
	}
	return j
}

// loneWait returns the longest a job waited for a worker while it was its
// pair's only work (nothing of its pair queued or running when it came).
func (q *workQueue) loneWait() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.loneWaitMax
}

// done records that a job popped from pair i finished.
func (q *workQueue) done(i int) {
	q.mu.Lock()
	q.pair(i).running--
	q.mu.Unlock()
}

// drop removes every queued job (not those running) and returns them.
func (q *workQueue) drop() []*job {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*job
	for _, p := range q.waiting {
		out = append(out, p.jobs[p.head:]...)
		p.jobs, p.head, p.waiting = p.jobs[:0], 0, false
	}
	q.waiting = q.waiting[:0]
	return out
}

// close wakes every worker waiting in pop; pop returns nil from then on.
func (q *workQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}
