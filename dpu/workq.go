package dpu

import (
	"sync"
	"time"
)

// workQueue holds the jobs handed to the worker pool, one FIFO per queue
// pair, and hands them out fairly: a free worker takes the oldest job of
// the pair with the fewest jobs running, and among those the pair whose
// last job ended longest ago. A pair that floods the agent with costly
// descriptors therefore cannot make another pair's job wait behind its
// queue. Nor behind the jobs already running: a long job yields every
// slice (Request.Yield, every YieldEvery bytes), and its worker then
// serves a lone job (its pair's only work), or the next job of a pair
// whose jobs are short, before it goes on (preempt); that job yields in
// turn, so jobs nest at most as deep as there are pairs. So a pair's lone
// job waits for at most one slice of another pair's work (wire.MaxTouch
// bounds the whole of one descriptor's) — one of each where several pairs
// have work and lone jobs arrive together — and the queue counts the
// slices it waited (loneWaitSlices).
type workQueue struct {
	mu      sync.Mutex
	cond    sync.Cond
	pairs   []*pairQueue // by queue pair index, grown on demand
	waiting []*pairQueue // pairs with jobs queued
	slices  uint64       // slices ended, all pairs: a yield or a job's end
	idle    int          // workers waiting in pop
	closed  bool

	loneWaitMax       time.Duration
	loneWaitSlicesMax uint64
}

type pairQueue struct {
	jobs    []*job
	head    int
	running int
	lastEnd uint64 // slices when a job of this pair last ended
	lastLen int    // slices its last job took (yields; 0: none ended)
	waiting bool
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
	j.queuedAtSlice = q.slices
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
// the fewest jobs running, then the one whose last job ended longest ago
// (not the one started longest ago: a pair served inside another's slice
// started after the job it interrupted, and would wait a slice more for
// it). With q.mu held and q.waiting not empty.
func (q *workQueue) fairest() int {
	best := 0
	for i, p := range q.waiting[1:] {
		b := q.waiting[best]
		if p.running < b.running || p.running == b.running && p.lastEnd < b.lastEnd {
			best = i + 1
		}
	}
	return best
}

// endSlice is called by a worker at the end of a slice of cur, a long job:
// it counts the slice and returns what preempt returns.
func (q *workQueue) endSlice(cur *job) *job {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.slices++
	return q.preemptLocked(cur)
}

// preempt is called by a worker between slices of cur, a long job: while
// no worker is idle, it returns the head job of a pair that has nothing
// running, for the worker to serve before cur goes on, if that job is
// lone (its pair's only work when queued) or its pair's last job took no
// more slices than cur has had; lone jobs first, then the pair whose last
// job ended longest ago; nil if none. A job served there runs to its end
// before cur goes on, so a pair whose jobs are long waits for cur to end
// (pop), and cur waits, for each job served in it, about as long as it has
// run (by that pair's last job): a flood's next job is not served inside a
// short one's slices (the short one's pair would wait for all of it),
// while a pair of short jobs with several in flight is served between the
// flood's slices, one job after another.
func (q *workQueue) preempt(cur *job) *job {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.preemptLocked(cur)
}

// preemptLocked is preempt with q.mu held.
func (q *workQueue) preemptLocked(cur *job) *job {
	if q.idle > 0 || q.closed || len(q.waiting) == 0 {
		return nil
	}
	best, bestLone := -1, false
	for i, p := range q.waiting {
		if p.running > 0 {
			continue
		}
		lone := p.jobs[p.head].lone
		if !lone && p.lastLen > cur.slices {
			continue
		}
		if best < 0 || lone && !bestLone || lone == bestLone && p.lastEnd < q.waiting[best].lastEnd {
			best, bestLone = i, lone
		}
	}
	if best < 0 {
		return nil
	}
	return q.take(best)
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
	p.running++
	j.waited = time.Since(j.queued)
	if j.lone {
		q.loneWaitMax = max(q.loneWaitMax, j.waited)
		q.loneWaitSlicesMax = max(q.loneWaitSlicesMax, q.slices-j.queuedAtSlice)
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

// loneWaitSlices returns the most slices of other jobs' work (yields and
// ends, on any worker) that passed while a job waited for a worker that
// was its pair's only work: the bound the scheduling keeps (one), whatever
// the machine does to the agent's cores meanwhile.
func (q *workQueue) loneWaitSlices() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.loneWaitSlicesMax
}

// done records that a job of pair i that yielded slices times finished:
// its last slice.
func (q *workQueue) done(i, slices int) {
	q.mu.Lock()
	q.slices++
	p := q.pair(i)
	p.running--
	p.lastEnd = q.slices
	p.lastLen = slices
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
