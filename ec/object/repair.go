package object

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hecsys/hec/shared/crc32c"
)

// Shard states in a Stat.
const (
	StateOK          = "ok"
	StateMissing     = "missing"     // the agent answered and does not hold it
	StateUnreachable = "unreachable" // the agent did not answer
	StateCorrupt     = "corrupt"     // stripes of it failed their CRC
	StateUncommitted = "uncommitted" // sealed, but the commit did not reach it
	StateStale       = "stale"       // the agent holds an older version only
	StateLeft        = "left"        // the agent is no longer a member: repair moves the shard to one that is
)

// ShardState is one shard of a Stat.
type ShardState struct {
	Index  int    `json:"index"`
	Node   uint32 `json:"node"`
	State  string `json:"state"`
	Detail string `json:"detail,omitempty"`
}

// Stat is what the agents hold of an object's current version.
type Stat struct {
	Header
	Shards  []ShardState `json:"shards"`
	Healthy int          `json:"healthy"` // shards in state ok
	// Versions are the versions held anywhere, newest first.
	Versions []Version `json:"versions"`
	Problems []string  `json:"problems,omitempty"`
}

// Degraded reports whether the object is below full redundancy.
func (s *Stat) Degraded() bool { return s.Healthy < len(s.Place) }

// Stat reports the current version of name and the state of each of its
// shards.
func (c *Coordinator) Stat(ctx context.Context, name string) (Stat, error) {
	view, err := c.look(ctx, name)
	if err != nil {
		return Stat{}, err
	}
	cur, err := view.current(name)
	if err != nil {
		return Stat{}, err
	}
	return statOf(view, cur), nil
}

func statOf(view *view, cur *version) Stat {
	st := Stat{Header: cur.Header}
	for _, vv := range view.versions() {
		st.Versions = append(st.Versions, vv.Version)
	}
	for _, l := range cur.liars {
		st.Problems = append(st.Problems, fmt.Sprintf("node %d: shard %d's record disagrees with the others'", l.Holder, l.Index))
	}
	for i, node := range cur.Place {
		ss := ShardState{Index: i, Node: node, State: StateMissing}
		var mine *Shard
		for j := range cur.holders[i] {
			if cur.holders[i][j].Holder == node {
				mine = &cur.holders[i][j]
			}
		}
		switch {
		case !slices.Contains(view.members, node):
			ss.State = StateLeft
		case view.unreachable[node] != nil:
			ss.State, ss.Detail = StateUnreachable, view.unreachable[node].Error()
		case mine == nil:
			for _, sh := range view.shards {
				if sh.Holder == node && sh.Index == i && sh.Version < cur.Version {
					ss.State, ss.Detail = StateStale, "holds "+string(sh.Version)
				}
			}
		case len(mine.Corrupt) > 0:
			ss.State, ss.Detail = StateCorrupt, fmt.Sprintf("stripes %v fail their CRC", mine.Corrupt)
		case !mine.Committed:
			ss.State = StateUncommitted
		default:
			ss.State = StateOK
			st.Healthy++
		}
		st.Shards = append(st.Shards, ss)
	}
	return st
}

// RepairResult is what a repair of one object did.
type RepairResult struct {
	Name    string   `json:"name"`
	Version Version  `json:"version,omitempty"`
	Before  int      `json:"healthy_before"`
	After   int      `json:"healthy_after"`
	Shards  int      `json:"shards"`
	Rebuilt []int    `json:"rebuilt,omitempty"`   // shards written again
	Commits []int    `json:"committed,omitempty"` // shards whose commit was sent again
	Tomb    bool     `json:"tombstone,omitempty"`
	Failed  []string `json:"failed,omitempty"`
}

// Repair brings name's current version back to full redundancy: shards
// missing, stale or corrupt are rebuilt from k valid ones and written to
// the agents of the placement; commits that did not arrive are sent
// again; a tombstone is spread to every agent, then purged. Agents that
// do not answer are left as they are, and said so.
func (c *Coordinator) Repair(ctx context.Context, name string) (RepairResult, error) {
	view, err := c.look(ctx, name)
	if err != nil {
		return RepairResult{Name: name}, err
	}
	return c.repair(ctx, name, view)
}

// repair is Repair from what the stores answered.
func (c *Coordinator) repair(ctx context.Context, name string, view *view) (RepairResult, error) {
	res := RepairResult{Name: name}
	cur, err := view.current(name)
	if cur == nil {
		return res, err
	}
	st := statOf(view, cur)
	res.Version, res.Before, res.After, res.Shards = cur.Version, st.Healthy, st.Healthy, len(cur.Place)
	if cur.Tomb() {
		res.Tomb = true
		if err := c.tombstone(ctx, cur.Header); err != nil {
			res.Failed = append(res.Failed, err.Error())
		}
		return res, nil
	}
	var rebuild, left []int
	for _, ss := range st.Shards {
		switch ss.State {
		case StateLeft:
			left = append(left, ss.Index)
		case StateUnreachable:
			res.Failed = append(res.Failed, fmt.Sprintf("shard %d: node %d did not answer", ss.Index, ss.Node))
		case StateUncommitted:
			if _, err := c.call(ctx, ss.Node, &Request{Kind: KindCommit, Name: name, Version: cur.Version}); err != nil {
				res.Failed = append(res.Failed, fmt.Sprintf("shard %d: commit: %v", ss.Index, err))
			} else {
				res.Commits = append(res.Commits, ss.Index)
				res.After++
			}
		case StateMissing, StateStale, StateCorrupt:
			rebuild = append(rebuild, ss.Index)
		}
	}
	if len(left) > 0 {
		moved, err := c.relocate(ctx, view, cur, left)
		res.Rebuilt = append(res.Rebuilt, moved...)
		res.After += len(moved)
		if err != nil {
			res.Failed = append(res.Failed, err.Error())
		}
	}
	if len(rebuild) == 0 {
		return res, nil
	}
	done, err := c.rebuild(ctx, cur, rebuild)
	res.Rebuilt = append(res.Rebuilt, done...)
	res.After += len(done)
	if err != nil {
		res.Failed = append(res.Failed, err.Error())
	}
	return res, nil
}

// relocate moves the shards at indices left (their agents are no longer
// members) to members not yet in the placement, ranked as Place ranks
// them: it rebuilds each there under the new placement, then records the
// new placement with every other holder.
func (c *Coordinator) relocate(ctx context.Context, view *view, cur *version, left []int) ([]int, error) {
	ranked, err := Place(cur.Name, view.members, len(view.members))
	if err != nil {
		return nil, err
	}
	moved := cur.Header
	moved.Place = slices.Clone(cur.Place)
	for _, i := range left {
		j := slices.IndexFunc(ranked, func(n uint32) bool { return !slices.Contains(moved.Place, n) })
		if j < 0 {
			return nil, fmt.Errorf("%w: no member is free to take shard %d of %s (%d members for %d shards)", ErrMembers, i, cur.Name, len(view.members), len(cur.Place))
		}
		moved.Place[i] = ranked[j]
	}
	nv := *cur
	nv.Header = moved
	done, err := c.rebuild(ctx, &nv, left)
	if len(done) == 0 {
		return nil, err
	}
	// The others learn the new placement; a holder that does not is
	// outvoted (readers take the header most shards agree on) and learns
	// it at the next repair.
	meta, _ := json.Marshal(&moved)
	var failed []string
	for i, hs := range cur.holders {
		for _, h := range hs {
			if slices.Contains(left, i) || !slices.Contains(view.members, h.Holder) {
				continue
			}
			if _, perr := c.call(ctx, h.Holder, &Request{Kind: KindPlace, Name: cur.Name, Index: i, Meta: meta}); perr != nil {
				failed = append(failed, perr.Error())
			}
		}
	}
	if len(failed) > 0 {
		err = errors.Join(err, fmt.Errorf("new placement of %s: %s", cur.Name, strings.Join(failed, "; ")))
	}
	return done, err
}

// rebuild writes shards want of version cur again, on their placed agents.
func (c *Coordinator) rebuild(ctx context.Context, cur *version, want []int) ([]int, error) {
	coder, err := c.coder(cur.K, cur.M)
	if err != nil {
		return nil, err
	}
	r := &Reader{c: c, v: cur, coder: coder, bad: map[[2]int]bool{}}
	for i, hs := range cur.holders {
		// A holder not at its place (there is none today) or a shard
		// being rebuilt is not a source.
		cur.holders[i] = slices.DeleteFunc(hs, func(sh Shard) bool { return len(sh.Corrupt) > 0 || slices.Contains(want, i) })
	}
	meta, _ := json.Marshal(&cur.Header)
	var failed []string
	var raced []int
	live := want[:0:0]
	for _, i := range want {
		if _, err := c.call(ctx, cur.Place[i], &Request{Kind: KindReplace, Name: cur.Name, Index: i, Meta: meta}); err != nil {
			failed = append(failed, fmt.Sprintf("shard %d: %v", i, err))
			continue
		}
		live = append(live, i)
	}
	for s := 0; s < cur.Stripes() && len(live) > 0; s++ {
		shards, _, dcrcs, err := r.gather(ctx, s, want)
		if err != nil {
			for _, i := range live {
				c.call(ctx, cur.Place[i], &Request{Kind: KindAbort, Name: cur.Name, Version: cur.Version})
			}
			return nil, fmt.Errorf("rebuild %s: %w", cur.Name, err)
		}
		size := cur.ShardBytes(s)
		for _, i := range live {
			shards[i] = make([]byte, 0, size)
		}
		if err := coder.ReconstructSome(shards, live); err != nil {
			return nil, fmt.Errorf("rebuild %s stripe %d: %w", cur.Name, s, err)
		}
		data, err := r.join(shards, s)
		if err != nil {
			return nil, err
		}
		dcrc := crc32c.Checksum(data)
		if !agrees(dcrcs, dcrc) {
			return nil, fmt.Errorf("rebuild %s stripe %d: %w: the shards read decode to bytes that fail the stripe's CRC", cur.Name, s, ErrCorrupt)
		}
		errs := parallel(len(live), func(j int) error {
			i := live[j]
			_, err := c.call(ctx, cur.Place[i], &Request{Kind: KindWrite, Name: cur.Name, Version: cur.Version, Index: i, Stripe: s,
				CRC: crc32c.Checksum(shards[i]), DataCRC: dcrc, Data: shards[i]})
			return err
		})
		next := live[:0:0]
		for j, err := range errs {
			switch {
			case errors.Is(err, ErrNotFound):
				raced = append(raced, live[j])
			case err != nil:
				failed = append(failed, fmt.Sprintf("shard %d: %v", live[j], err))
			default:
				next = append(next, live[j])
			}
		}
		live = next
	}
	var done []int
	for _, i := range live {
		_, err := c.call(ctx, cur.Place[i], &Request{Kind: KindSeal, Name: cur.Name, Version: cur.Version, Index: i})
		if errors.Is(err, ErrNotFound) {
			raced = append(raced, i)
			continue
		}
		if err == nil {
			_, err = c.call(ctx, cur.Place[i], &Request{Kind: KindCommit, Name: cur.Name, Version: cur.Version})
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("shard %d: %v", i, err))
			continue
		}
		done = append(done, i)
	}
	// A shard whose agent no longer had the one being written: another
	// rebuilder (an agent's scrub, a second repair) shared it and sealed
	// it first — then it is whole there — or it was dropped.
	for _, i := range raced {
		if err := c.sealedElsewhere(ctx, cur, i); err != nil {
			failed = append(failed, fmt.Sprintf("shard %d: %v", i, err))
			continue
		}
		done = append(done, i)
	}
	if len(failed) > 0 {
		return done, fmt.Errorf("rebuild %s: %s", cur.Name, strings.Join(failed, "; "))
	}
	return done, nil
}

// sealedElsewhere checks that shard i of cur, whose writing its agent
// dropped under this rebuild, is sealed there uncorrupted all the same
// (another rebuilder's), and commits it, as that one would.
func (c *Coordinator) sealedElsewhere(ctx context.Context, cur *version, i int) error {
	rep, err := c.call(ctx, cur.Place[i], &Request{Kind: KindStat, Name: cur.Name})
	if err != nil {
		return err
	}
	var held []Shard
	if err := json.Unmarshal(rep.Body, &held); err != nil {
		return fmt.Errorf("node %d: stat: %w", cur.Place[i], err)
	}
	if !slices.ContainsFunc(held, func(sh Shard) bool {
		return sh.Index == i && len(sh.Corrupt) == 0 && sh.Header.Same(&cur.Header)
	}) {
		return fmt.Errorf("node %d dropped the shard being written, and holds none of version %s", cur.Place[i], cur.Version)
	}
	_, err = c.call(ctx, cur.Place[i], &Request{Kind: KindCommit, Name: cur.Name, Version: cur.Version})
	return err
}

// RepairAll repairs every object the agents hold, tombstones included, and
// returns what it did for each.
func (c *Coordinator) RepairAll(ctx context.Context) ([]RepairResult, error) {
	all, err := c.list(ctx, "")
	if err != nil {
		return nil, err
	}
	var out []RepairResult
	for _, h := range all {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		r, err := c.Repair(ctx, h.Name)
		if err != nil {
			r.Failed = append(r.Failed, err.Error())
		}
		out = append(out, r)
	}
	return out, nil
}

// Scrub is one agent's background pass over one name it holds: the agent
// that leads the name — the lowest node id among those that answered
// holding a shard of its current version — repairs it when it is below
// full redundancy; the others leave it. It reports whether self led,
// whether the name was degraded, and what the repair did.
func (c *Coordinator) Scrub(ctx context.Context, name string, self uint32) (led, degraded bool, res RepairResult, err error) {
	view, err := c.look(ctx, name)
	if err != nil {
		return false, false, res, err
	}
	cur, _ := view.current(name)
	if cur == nil {
		return false, false, res, nil // nothing committed yet (a Put under way), or purged
	}
	leader := uint32(0)
	for _, hs := range cur.holders {
		for _, h := range hs {
			if leader == 0 || h.Holder < leader {
				leader = h.Holder
			}
		}
	}
	if leader != self {
		return false, false, res, nil
	}
	st := statOf(view, cur)
	if !st.Degraded() && !cur.Tomb() {
		return true, false, res, nil
	}
	res, err = c.repair(ctx, name, view)
	return true, !cur.Tomb(), res, err
}
