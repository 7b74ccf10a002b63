package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hecsys/hec/coll"
	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/host/cluster"
	"github.com/hecsys/hec/shared/api"
)

// collStatusCmd is coll status: every communicator's flight recorder, as
// each agent's rank tells it, so that a hang is diagnosed from one
// command: which rank is behind, and at which collective.
func collStatusCmd(a *app) *cobra.Command {
	var clusterName, clusterState string
	var recent int
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status [MGMT-ADDR...]",
		Short: "each communicator's ranks: the last collective called, started and completed, the one running, and the ranks behind",
		Long: `status asks the agents whose management addresses are given, else the agent
(--mgmt), or every agent of a test cluster (--cluster),
for its communicators' flight recorders (GET /v1/coll) and prints, per
communicator, each rank's last collective called, started and completed,
the one running and for how long. A rank whose agent does not answer (a
stopped or hung process) is shown with the collective the other ranks last
heard it at. The ranks behind the others are named at the end: those at
an earlier collective that do not answer or are not running it, and apart
from them the ranks running it, waiting on the ones behind. Where every
rank reached the same collective, the ranks that do not answer while the
others run it are named silent in it.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			targets, err := a.agentTargets(args, clusterName, clusterState)
			if err != nil {
				return err
			}
			return a.collStatus(cmd.Context(), targets, recent, timeout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&clusterName, "cluster", "", "every agent of the test cluster NAME (--cluster=NAME; --cluster alone: hec)")
	f.Lookup("cluster").NoOptDefVal = "hec"
	f.StringVar(&clusterState, "cluster-state", "", "the cluster's state directory (default /run/hec/cluster-NAME)")
	f.IntVar(&recent, "recent", 0, "also list each rank's last N collectives")
	f.DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for each agent's answer")
	return uses(cmd, useMgmt|useOutput)
}

// agentTarget is an agent a command asks over its management API (coll
// status, trace record): by address, the default one, or a test
// cluster's (agentTargets).
type agentTarget struct {
	name string
	mgmt *host.Mgmt
}

func (a *app) agentTargets(addrs []string, name, state string) ([]agentTarget, error) {
	if len(addrs) > 0 && name != "" {
		return nil, usageError{fmt.Errorf("management addresses %v and --cluster %s: give one or the other (a cluster's name goes after =: --cluster=NAME)", addrs, name)}
	}
	if len(addrs) > 0 {
		var out []agentTarget
		for _, addr := range addrs {
			m := host.NewMgmt(addr)
			if tok, err := a.token(); err == nil {
				m.Token = tok
			}
			out = append(out, agentTarget{name: addr, mgmt: m})
		}
		return out, nil
	}
	if name == "" {
		return []agentTarget{{name: a.mgmt, mgmt: a.client()}}, nil
	}
	st, err := cluster.Load(name, state)
	if err != nil {
		return nil, err
	}
	var out []agentTarget
	for _, n := range st.Nodes {
		out = append(out, agentTarget{name: "node " + strconv.Itoa(n.Index),
			mgmt: &host.Mgmt{Addr: n.Mgmt(), HTTP: cluster.Client(st.Switch), Token: n.Token()}})
	}
	return out, nil
}

// collAgentReport is one agent's answer (-o json).
type collAgentReport struct {
	Agent string         `json:"agent"`
	Comms []api.CollComm `json:"comms,omitempty"`
	Error string         `json:"error,omitempty"`
}

// collRankRow is one rank of a communicator, as its agent told it or, for
// an agent that did not answer, as the others heard it.
type collRankRow struct {
	Rank     int             `json:"rank"`
	Agent    string          `json:"agent,omitempty"`
	Answered bool            `json:"answered"`
	Comm     *api.CollComm   `json:"status,omitempty"`
	Heard    uint32          `json:"last_heard"` // the latest collective another rank heard it at
	HeardBy  int             `json:"heard_by"`
	Running  *api.CollRecord `json:"running,omitempty"`
}

// collCommReport is one communicator across its ranks (-o json).
type collCommReport struct {
	Comm  uint64        `json:"comm"`
	Epoch uint64        `json:"epoch"`
	Size  int           `json:"size"`
	Ranks []collRankRow `json:"ranks"`
	// Behind are the ranks at an earlier collective than the latest any
	// rank started, At: those that do not answer, or answer without
	// running that earlier collective. Waiting are the ranks at an earlier
	// collective that answer and are running it: held up by the ones
	// behind (a ring's step waits on its neighbour). Where every rank at
	// an earlier collective is running it, they are all behind.
	Behind  []int `json:"behind"`
	Waiting []int `json:"waiting,omitempty"`
	// Silent are the ranks that do not answer while every rank reached
	// At and some that answer are running a collective: none is behind,
	// and the ones running wait on the silent (a rank stopped inside
	// the collective the others are in).
	Silent []int  `json:"silent,omitempty"`
	At     uint32 `json:"at"` // that latest collective
}

func (a *app) collStatus(ctx context.Context, targets []agentTarget, recent int, timeout time.Duration) error {
	reports := make([]collAgentReport, len(targets))
	for i, t := range targets {
		reports[i].Agent = t.name
		tctx, cancel := context.WithTimeout(ctx, timeout)
		comms, err := t.mgmt.Coll(tctx)
		cancel()
		if err != nil {
			reports[i].Error = err.Error()
			continue
		}
		reports[i].Comms = comms
	}
	comms := collByComm(reports)
	if a.jsonOut() {
		return a.printJSON(map[string]any{"agents": reports, "communicators": comms})
	}
	for _, r := range reports {
		if r.Error != "" {
			fmt.Fprintf(a.out, "%s: no answer: %s\n", r.Agent, r.Error)
		}
	}
	if len(comms) == 0 {
		fmt.Fprintln(a.out, "no communicators")
		return nil
	}
	now := time.Now()
	for _, c := range comms {
		fmt.Fprintf(a.out, "\ncommunicator %016x epoch %d, %d ranks\n", c.Comm, c.Epoch, c.Size)
		tw := tabwriter.NewWriter(a.out, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RANK\tAGENT\tCALLS\tSTARTED\tCOMPLETED\tRUNNING\tBROKEN")
		for _, r := range c.Ranks {
			if !r.Answered {
				heard := "never heard"
				if r.Heard != 0 {
					heard = fmt.Sprintf("last heard at #%d (by rank %d)", r.Heard, r.HeardBy)
				}
				fmt.Fprintf(tw, "%d\t%s\t-\t-\t-\tno answer: %s\t-\n", r.Rank, dash(r.Agent), heard)
				continue
			}
			st := r.Comm
			running := "-"
			if rec := r.Running; rec != nil {
				running = fmt.Sprintf("#%d %s %d B %s for %s, %d messages", rec.Seq, rec.Kind, rec.Bytes, rec.DType,
					now.Sub(rec.Started).Round(time.Millisecond), rec.Messages)
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t#%d\t#%d\t%s\t%s\n", r.Rank, r.Agent, st.Calls, st.Started, st.Completed, running, dash(st.Broken))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(c.Behind) > 0 {
			fmt.Fprintf(a.out, "behind #%d: ranks %v\n", c.At, c.Behind)
		}
		if len(c.Silent) > 0 {
			fmt.Fprintf(a.out, "silent in #%d: ranks %v\n", c.At, c.Silent)
		}
		if len(c.Waiting) > 0 {
			fmt.Fprintf(a.out, "waiting on them: ranks %v\n", c.Waiting)
		}
		if recent > 0 {
			for _, r := range c.Ranks {
				if r.Comm == nil {
					continue
				}
				recs := r.Comm.Recent[max(0, len(r.Comm.Recent)-recent):]
				for _, rec := range recs {
					took := "-"
					if !rec.Ended.IsZero() && !rec.Started.IsZero() {
						took = rec.Ended.Sub(rec.Started).String()
					}
					fmt.Fprintf(a.out, "  rank %d #%d %s %d B %s %s %s %s\n", r.Rank, rec.Seq, rec.Kind, rec.Bytes, rec.DType, rec.State, took, rec.Err)
				}
			}
		}
	}
	return nil
}

// collByComm gathers the agents' answers by communicator: a row per rank,
// the ranks whose agents did not answer filled from what the others last
// heard of them, and the ranks behind the latest collective started.
func collByComm(reports []collAgentReport) []collCommReport {
	byKey := map[[2]uint64]*collCommReport{}
	var keys [][2]uint64
	for _, rep := range reports {
		for i := range rep.Comms {
			cc := &rep.Comms[i]
			k := [2]uint64{cc.Comm, cc.Epoch}
			c := byKey[k]
			if c == nil {
				c = &collCommReport{Comm: cc.Comm, Epoch: cc.Epoch, Size: cc.Size, Ranks: make([]collRankRow, cc.Size)}
				for r := range c.Ranks {
					c.Ranks[r] = collRankRow{Rank: r, HeardBy: -1}
				}
				byKey[k] = c
				keys = append(keys, k)
			}
			if cc.Rank < 0 || cc.Rank >= c.Size {
				continue
			}
			row := &c.Ranks[cc.Rank]
			row.Agent, row.Answered, row.Comm = rep.Agent, true, cc
			for j := len(cc.Recent) - 1; j >= 0; j-- {
				if cc.Recent[j].State == "started" {
					row.Running = &cc.Recent[j]
					break
				}
			}
			if c.At == 0 || seqBefore(c.At, cc.Started) {
				c.At = cc.Started
			}
			for r, h := range cc.Heard {
				if r < c.Size && r != cc.Rank && (c.Ranks[r].Heard == 0 || seqBefore(c.Ranks[r].Heard, h)) {
					c.Ranks[r].Heard, c.Ranks[r].HeardBy = h, cc.Rank
				}
			}
		}
	}
	slices.SortFunc(keys, func(a, b [2]uint64) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	var out []collCommReport
	for _, k := range keys {
		c := byKey[k]
		c.judge()
		out = append(out, *c)
	}
	return out
}

// judge names the ranks behind c.At, the ones waiting on them, and,
// where none is behind, the silent ranks that the running ones wait on.
func (c *collCommReport) judge() {
	for _, r := range c.Ranks {
		reached := r.Heard
		if r.Answered {
			reached = r.Comm.Started
		}
		if !seqBefore(reached, c.At) {
			continue
		}
		if r.Answered && r.Running != nil && r.Running.Seq == reached {
			c.Waiting = append(c.Waiting, r.Rank)
		} else {
			c.Behind = append(c.Behind, r.Rank)
		}
	}
	if len(c.Behind) == 0 {
		c.Behind, c.Waiting = c.Waiting, nil
	}
	if len(c.Behind) == 0 {
		for _, r := range c.Ranks {
			switch {
			case !r.Answered:
				c.Silent = append(c.Silent, r.Rank)
			case r.Running != nil:
				c.Waiting = append(c.Waiting, r.Rank)
			}
		}
		if len(c.Silent) == 0 || len(c.Waiting) == 0 {
			c.Silent, c.Waiting = nil, nil
		}
	}
}

// seqBefore reports whether collective a came before b, in the numbers'
// space that wraps (coll.SeqBits).
func seqBefore(a, b uint32) bool {
	d := (b - a) & (1<<coll.SeqBits - 1)
	return d != 0 && d < 1<<(coll.SeqBits-1)
}
