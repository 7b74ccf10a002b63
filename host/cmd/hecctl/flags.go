package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// durationFlag is a duration flag.
type durationFlag struct{ d time.Duration }

func (f *durationFlag) String() string { return f.d.String() }
func (f *durationFlag) Type() string   { return "duration" }
func (f *durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 30s or 1h")
	}
	f.d = d
	return nil
}

// rateFlags is cluster up's --rate LINK=RATE, repeatable.
type rateFlags map[int]string

func (r rateFlags) String() string { return fmt.Sprint(map[int]string(r)) }
func (r rateFlags) Type() string   { return "LINK=RATE" }
func (r rateFlags) Set(s string) error {
	link, rate, ok := strings.Cut(s, "=")
	if !ok || rate == "" {
		return fmt.Errorf("want LINK=RATE, such as 2=1gbit or all=500mbit")
	}
	if link == "all" {
		r[0] = rate
		return nil
	}
	n, err := strconv.Atoi(link)
	if err != nil || n < 1 {
		return fmt.Errorf("link %q: a node number (1..) or all", link)
	}
	r[n] = rate
	return nil
}
