package rail

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The rails' names, as every flag, plan, row and metric spells them.
const (
	Host = "host" // this process's CPU cores
	DPU  = "dpu"  // the agent's cores (a DPU's Arm cores, or the emulated agent)
	// Auto is not a rail: it has the planner choose among the rails, and
	// split an operation where that pays.
	Auto = "auto"
)

// Choices is every value a --rails flag takes, in the order help text
// lists them.
var Choices = []string{Host, DPU, Auto}

// ErrChoice is returned for a --rails value no service knows.
var ErrChoice = errors.New("rail: unknown rails")

// ParseChoice parses one --rails value: a rail's name or Auto, case and
// surrounding space ignored. allowed narrows the values a service takes
// (none: every one of Choices).
func ParseChoice(s string, allowed ...string) (string, error) {
	if len(allowed) == 0 {
		allowed = Choices
	}
	c := strings.ToLower(strings.TrimSpace(s))
	if !slices.Contains(allowed, c) {
		return "", fmt.Errorf("%w: %q (want %s)", ErrChoice, s, either(allowed))
	}
	return c, nil
}

// ParseChoices parses a comma-separated list of --rails values (each as
// ParseChoice takes it), in order, without repeats.
func ParseChoices(s string, allowed ...string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		c, err := ParseChoice(f, allowed...)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// either is "a, b or c".
func either(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}
