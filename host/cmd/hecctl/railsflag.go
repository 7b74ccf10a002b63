package main

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/hecsys/hec/shared/rail"
)

// railsValue is every command's --rails flag: rail names as shared/rail
// spells and parses them (rail.ParseChoices), limited to those the
// command serves; one: a single value.
type railsValue struct {
	names   []string
	allowed []string
	one     bool
	store   func([]string)
}

func (v *railsValue) Set(s string) error {
	c, err := rail.ParseChoices(s, v.allowed...)
	if err != nil {
		return err
	}
	if v.one && len(c) != 1 {
		return fmt.Errorf("%w: %q (want one of %s)", rail.ErrChoice, s, strings.Join(v.allowed, ", "))
	}
	v.names = c
	v.store(c)
	return nil
}

func (v *railsValue) String() string { return strings.Join(v.names, ",") }
func (v *railsValue) Type() string   { return "rails" }

// railsFlag defines --rails on f: a comma-separated list, in order, into p.
func railsFlag(f *pflag.FlagSet, p *[]string, def []string, allowed []string, usage string) {
	*p = def
	f.Var(&railsValue{names: def, allowed: allowed, store: func(c []string) { *p = c }}, "rails", usage)
}

// railFlag defines --rails on f: one of allowed, into p.
func railFlag(f *pflag.FlagSet, p *string, def string, allowed []string, usage string) {
	*p = def
	f.Var(&railsValue{names: []string{def}, allowed: allowed, one: true, store: func(c []string) { *p = c[0] }}, "rails", usage)
}
