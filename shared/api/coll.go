package api

import "time"

// CollComm is one communicator of an agent's coll service as its flight
// recorder tells it (GET /v1/coll; hecctl coll status): this agent's
// rank's progress, what it last heard from each other rank, and its last
// collectives.
type CollComm struct {
	Comm  uint64   `json:"comm"`
	Epoch uint64   `json:"epoch"`
	Rank  int      `json:"rank"`
	Size  int      `json:"size"`
	Nodes []uint32 `json:"nodes"` // the ranks' agents' peer ids
	// Calls counts the collectives called; Started and Completed are the
	// numbers of the last started and the last completed here.
	Calls     uint64 `json:"calls"`
	Started   uint32 `json:"started"`
	Completed uint32 `json:"completed"`
	// Heard is, by rank, the number of the last collective a message of
	// it came here (0: none yet).
	Heard  []uint32     `json:"heard"`
	Broken string       `json:"broken,omitempty"`
	Recent []CollRecord `json:"recent"`
}

// CollRecord is one collective in a flight recorder.
type CollRecord struct {
	Seq      uint32    `json:"seq"`
	Kind     string    `json:"kind"`
	Bytes    int       `json:"bytes"`
	DType    string    `json:"dtype"`
	State    string    `json:"state"` // enqueued, started, completed, failed
	Messages uint64    `json:"messages"`
	Enqueued time.Time `json:"enqueued"`
	Started  time.Time `json:"started,omitzero"`
	Ended    time.Time `json:"ended,omitzero"`
	Err      string    `json:"error,omitempty"`
}
