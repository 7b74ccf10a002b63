package main

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/shared/api"
)

// TestCollByCommNamesTheSilentRank: four agents asked, rank 2's silent;
// the others at #7, rank 3 heard it last at #5 (and once across the
// numbers' wrap: #5 the last number before it, #7 = 1): rank 2 is behind,
// shown with what rank 3 heard.
func TestCollByCommNamesTheSilentRank(t *testing.T) {
	const top = 1<<coll.SeqBits - 1
	for _, base := range []uint32{0, top - 5} {
		at := func(k uint32) uint32 { return (base + k) & top }
		var reports []collAgentReport
		for _, r := range []int{0, 1, 3} {
			heard := []uint32{at(7), at(7), 0, at(7)}
			if r == 3 {
				heard[2] = at(5)
			}
			reports = append(reports, collAgentReport{Agent: fmt.Sprint("agent", r),
				Comms: []api.CollComm{{Comm: 9, Epoch: 1, Rank: r, Size: 4, Started: at(7), Completed: at(6), Heard: heard}}})
		}
		reports = append(reports, collAgentReport{Agent: "agent2", Error: "deadline exceeded"})
		comms := collByComm(reports)
		if len(comms) != 1 {
			t.Fatalf("%d communicators", len(comms))
		}
		c := comms[0]
		if c.At != at(7) || !slices.Equal(c.Behind, []int{2}) || c.Ranks[2].Answered || c.Ranks[2].Heard != at(5) || c.Ranks[2].HeardBy != 3 {
			t.Errorf("base %d: %+v", base, c)
		}
	}
}

// TestCollByCommTellsWaitingFromBehind: rank 2 stopped inside #6 after
// ranks 1 and 3 had its messages and went on to #7; rank 0 still runs #6,
// waiting for what rank 2 never sent. Rank 2 is behind, rank 0 waits on it.
// With rank 2 answering and running #6 too, both are behind.
func TestCollByCommTellsWaitingFromBehind(t *testing.T) {
	for _, silent := range []bool{true, false} {
		var reports []collAgentReport
		for r := range 4 {
			cc := api.CollComm{Comm: 9, Epoch: 1, Rank: r, Size: 4, Started: 7, Completed: 6, Heard: []uint32{6, 7, 6, 7}}
			if r == 0 || r == 2 {
				cc.Started, cc.Completed = 6, 5
				cc.Recent = []api.CollRecord{{Seq: 5, State: "completed"}, {Seq: 6, State: "started"}}
			}
			if r == 2 && silent {
				reports = append(reports, collAgentReport{Agent: "agent2", Error: "deadline exceeded"})
				continue
			}
			reports = append(reports, collAgentReport{Agent: fmt.Sprint("agent", r), Comms: []api.CollComm{cc}})
		}
		c := collByComm(reports)[0]
		wantBehind, wantWaiting := []int{2}, []int{0}
		if !silent {
			wantBehind, wantWaiting = []int{0, 2}, nil
		}
		if c.At != 7 || !slices.Equal(c.Behind, wantBehind) || !slices.Equal(c.Waiting, wantWaiting) {
			t.Errorf("rank 2 silent %v: at #%d, behind %v, waiting %v; want behind %v, waiting %v", silent, c.At, c.Behind, c.Waiting, wantBehind, wantWaiting)
		}
	}
}

// TestCollByCommNamesTheSilentOneInTheSameCollective: rank 2 stopped
// inside #6 after every rank started it; the others run #6, waiting. No
// rank is behind; rank 2 is silent in #6, the others wait on it. With
// rank 2 answering, nobody is named.
func TestCollByCommNamesTheSilentOneInTheSameCollective(t *testing.T) {
	for _, silent := range []bool{true, false} {
		var reports []collAgentReport
		for r := range 4 {
			if r == 2 && silent {
				reports = append(reports, collAgentReport{Agent: "agent2", Error: "deadline exceeded"})
				continue
			}
			cc := api.CollComm{Comm: 9, Epoch: 1, Rank: r, Size: 4, Started: 6, Completed: 5, Heard: []uint32{6, 6, 6, 6},
				Recent: []api.CollRecord{{Seq: 5, State: "completed"}, {Seq: 6, State: "started"}}}
			reports = append(reports, collAgentReport{Agent: fmt.Sprint("agent", r), Comms: []api.CollComm{cc}})
		}
		c := collByComm(reports)[0]
		wantSilent, wantWaiting := []int{2}, []int{0, 1, 3}
		if !silent {
			wantSilent, wantWaiting = nil, nil
		}
		if c.At != 6 || len(c.Behind) != 0 || !slices.Equal(c.Silent, wantSilent) || !slices.Equal(c.Waiting, wantWaiting) {
			t.Errorf("rank 2 silent %v: at #%d, behind %v, silent %v, waiting %v; want silent %v, waiting %v",
				silent, c.At, c.Behind, c.Silent, c.Waiting, wantSilent, wantWaiting)
		}
	}
}
