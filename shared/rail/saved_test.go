package rail

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"
)

func savedRails() []Rail {
	return []Rail{{Name: Host, Kind: HostCPU, Alpha: 20 * time.Microsecond, Rate: 2e9},
		{Name: DPU, Kind: DPUCores, Alpha: 200 * time.Microsecond, Rate: 3e9}}
}

// TestSavedTableRoundTrip: a table, tuned bands included, saved as JSON
// and loaded again plans every size as the original does, with the same
// predictions and the same explanation.
func TestSavedTableRoundTrip(t *testing.T) {
	tab := NewTable(savedRails(), 64, 0.1, 1.7, Time)
	split := tab.Candidates(16<<20, 10)
	var sp Plan
	for _, p := range split {
		if len(p.Shares) == 2 {
			sp = p
		}
	}
	if len(sp.Shares) != 2 {
		t.Fatalf("no split among the candidates at 16 MiB: %v", split)
	}
	sp.Predicted = 9 * time.Millisecond
	one := tab.Lookup(8)
	one.Predicted = 50 * time.Microsecond
	tab = tab.Pin(16<<20, sp, "split 9ms (model 7ms)").Pin(8, one, "host alone 50µs (model 20µs)")
	b, err := json.Marshal(tab.Save())
	if err != nil {
		t.Fatal(err)
	}
	var s Saved
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	got, err := Load(s)
	if err != nil {
		t.Fatal(err)
	}
	if got.Explain() != tab.Explain() {
		t.Fatalf("loaded:\n%s\nsaved:\n%s", got.Explain(), tab.Explain())
	}
	for _, size := range []int64{1, 8, 4096, 1 << 20, 12 << 20, 16 << 20, 1 << 30} {
		a, b := tab.Lookup(size), got.Lookup(size)
		if Words(a) != Words(b) || a.Predicted != b.Predicted || got.Pinned(size) != tab.Pinned(size) {
			t.Errorf("%d bytes: loaded plans %s in %v, saved %s in %v", size, Words(b), b.Predicted, Words(a), a.Predicted)
		}
	}
}

// TestLookupScalesWhatTuningMeasured: a pinned band predicts what its
// plan measured at the band's size, scaled to other sizes of the band as
// the model scales; an unpinned band the model's time.
func TestLookupScalesWhatTuningMeasured(t *testing.T) {
	tab := NewTable(savedRails(), 64, 0.1, 1, Time)
	p := tab.Lookup(1 << 20)
	model := p.Predicted
	p.Predicted = 3 * model
	tab = tab.Pin(1<<20, p, "measured")
	if got := tab.Lookup(1 << 20).Predicted; got != 3*model {
		t.Errorf("at the size measured: %v, want %v", got, 3*model)
	}
	at := int64(700 << 10)
	want := 3 * float64(NewTable(savedRails(), 64, 0.1, 1, Time).Lookup(at).Predicted)
	if got := float64(tab.Lookup(at).Predicted); math.Abs(got/want-1) > 0.01 {
		t.Errorf("at %d bytes: %v, want %v", at, time.Duration(got), time.Duration(want))
	}
}

// TestNoSplitTable: a table made with NoSplit runs every size on one
// rail, and offers no split to tune.
func TestNoSplitTable(t *testing.T) {
	rails := []Rail{{Name: Host, Kind: HostCPU, Rate: 1e9}, {Name: DPU, Kind: DPUCores, Rate: 1e9}}
	tab := NewTable(rails, 64, NoSplit, 1, Time)
	for size := int64(1); size <= 1<<40; size *= 3 {
		if p := tab.Lookup(size); len(p.Shares) != 1 {
			t.Fatalf("%d bytes: %s", size, Words(p))
		}
		for _, c := range tab.Candidates(size, 100) {
			if len(c.Shares) != 1 {
				t.Fatalf("%d bytes: a candidate splits: %s", size, Words(c))
			}
		}
	}
}

// TestLoadRefusesWhatNoTableGives: a damaged file is measured over, not
// obeyed.
func TestLoadRefusesWhatNoTableGives(t *testing.T) {
	good := func() Saved {
		tab := NewTable(savedRails(), 64, 0.1, 1.5, Time)
		p := tab.Lookup(1 << 20)
		p.Predicted = time.Millisecond
		return tab.Pin(1<<20, p, "measured").Save()
	}
	if _, err := Load(good()); err != nil {
		t.Fatal(err)
	}
	for name, damage := range map[string]func(*Saved){
		"no rails":           func(s *Saved) { s.Rails = nil },
		"negative rate":      func(s *Saved) { s.Rails[0].Rate = -1 },
		"zero rate":          func(s *Saved) { s.Rails[1].Rate = 0 },
		"negative α":         func(s *Saved) { s.Rails[0].AlphaNS = -5 },
		"unknown kind":       func(s *Saved) { s.Rails[0].Kind = "quantum" },
		"cost below 1":       func(s *Saved) { s.Cost = 0.5 },
		"NaN cost":           func(s *Saved) { s.Cost = math.NaN() },
		"objective":          func(s *Saved) { s.Objective = "speed" },
		"align":              func(s *Saved) { s.Align = 0 },
		"gain above NoSplit": func(s *Saved) { s.MinGain = 2 },
		"share of no rail":   func(s *Saved) { s.Tuned[0].Shares[0].Rail = "gpu" },
		"shares too long":    func(s *Saved) { s.Tuned[0].Shares[0].Bytes++ },
		"shares too short":   func(s *Saved) { s.Tuned[0].Shares[0].Bytes-- },
		"negative share":     func(s *Saved) { s.Tuned[0].Shares[0].Bytes = -1 },
		"nothing measured":   func(s *Saved) { s.Tuned[0].MeasuredNS = 0 },
		"split in NoSplit": func(s *Saved) {
			s.MinGain = NoSplit
			s.Tuned[0].Shares = []SavedShare{{Rail: Host, Bytes: 1}, {Rail: DPU, Bytes: s.Tuned[0].Size - 1}}
		},
	} {
		s := good()
		damage(&s)
		if _, err := Load(s); !errors.Is(err, ErrSaved) {
			t.Errorf("%s: Load gave %v, want ErrSaved", name, err)
		}
	}
}
