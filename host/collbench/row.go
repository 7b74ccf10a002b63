package collbench

// Row is one row of coll bench's table: a rail, a size, and what the
// collective measured there, in nccl-tests' terms.
type Row struct {
	Rail     string  `json:"rail"`
	Size     int     `json:"size"`  // bytes
	Count    int     `json:"count"` // elements
	Type     string  `json:"type"`
	Redop    string  `json:"redop"`
	TimeUS   float64 `json:"time_us"` // the slowest rank's mean
	AlgBW    float64 `json:"algbw_gbs"`
	BusBW    float64 `json:"busbw_gbs"`
	Wrong    int64   `json:"wrong"`       // elements that differ from the expected result, every rank and iteration
	HostCPU  float64 `json:"host_cpu_ms"` // host CPU per collective, mean over the ranks
	HostFrac float64 `json:"host_fraction,omitempty"`
	Plan     string  `json:"plan,omitempty"` // auto: where the planner ran it, in words
	// PredictedUS is auto's predicted time for the plan it ran: what the
	// tuning measured for the size's band, scaled by the model (the
	// model's alone where nothing was tuned).
	PredictedUS float64 `json:"predicted_us,omitempty"`
	// Explain, in a row of its own, is auto's table after tuning
	// (rail.Table.Explain), with --explain.
	Explain string `json:"explain,omitempty"`
}
