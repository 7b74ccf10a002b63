// Package rail is the rail model and the planner that splits one operation
// across rails so that all of them finish together.
//
// A rail is a place that can do a piece of work — host CPU cores, DPU
// cores, the XDP fast path, a GPU, a network path — described by a fixed
// cost α per operation and a rate (bytes per second, 1/β), with a
// confidence. Given rails and a size, Split solves for the shares that make
// every rail used finish at the same time t:
//
//	α_i + b_i / r_i = t   for every rail used,   Σ b_i = size
//
// by water-filling in order of fixed cost: a rail whose α is not below the
// common finishing time would only slow the operation down, so it is
// dropped (and the plan says why). Under the model the plan is never slower
// than the best single rail.
//
// Estimates refresh from observed completions (Estimator.Observe, the
// median of the latest rates net of α), so a rail that slows down — a busy
// DPU — gets less work in the next plan, while ops slowed by something
// outside the rail (a cold start, a preemption) do not move it.
//
// Standard library only: the host library and the agent both plan with it.
package rail
