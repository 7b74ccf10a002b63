package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hecsys/hec/host"
	"github.com/hecsys/hec/shared/api"
	"github.com/hecsys/hec/shared/wire"
)

// explain turns an error into an exit code and one line: what was tried,
// why it failed, what to do next. -v adds the whole chain.
func explain(err error, a *app) (int, string) {
	code, line := exitFailed, firstLine(err)
	var ue usageError
	var un unreachable
	switch {
	case strings.HasPrefix(err.Error(), "unknown command"):
		code, line = exitUsage, firstLine(err)+" (see hecctl --help)"
	case errors.As(err, &ue):
		code, line = exitUsage, ue.Error()+" (see hecctl --help)"
	case errors.Is(err, host.ErrDenied) || errors.Is(err, wire.StatusDenied):
		code = exitRefused
		line = firstLine(err)
		if errors.As(err, &un) {
			line = "the agent at " + strings.TrimPrefix(un.target, "tcp://") + " refused the connection: " + firstLine(un.err)
		}
		for _, suffix := range []string{host.ErrRefused.Error(), host.ErrDenied.Error(), wire.StatusDenied.Error()} {
			line = strings.TrimSuffix(line, ": "+suffix)
		}
		switch {
		case a.tok == "":
			line += " (no token given: --token-file FILE, $HEC_TOKEN_FILE or $HEC_TOKEN)"
		case !strings.Contains(line, "no challenge"):
			line += " (the token given was refused)"
		}
	case errors.As(err, &un) && errors.Is(err, host.ErrAgentDead):
		code = exitUnreachable
		line = fmt.Sprintf("no agent at %s (the heartbeat of the agent that made it stood still: it was killed or crashed, and left its region file): start one with bin/hecd, or pass --agent",
			strings.TrimPrefix(un.target, "shm://"))
	case errors.As(err, &un):
		code = exitUnreachable
		line = fmt.Sprintf("no agent at %s (%s): %s", strings.TrimPrefix(un.target, "shm://"), rootCause(un.err), hintFor(un.target))
	case errors.Is(err, host.ErrUnreachable):
		code = exitUnreachable
		line = fmt.Sprintf("no agent answers at %s (%s): start one with bin/hecd, or pass --mgmt or --agent", a.mgmt, rootCause(err))
	case errors.Is(err, host.ErrRefused):
		code = exitRefused
		line = strings.TrimSuffix(firstLine(err), ": "+host.ErrRefused.Error())
	}
	if a.verbose {
		line += "\n  " + err.Error()
	}
	return code, line
}

// hintFor says what to do when no agent answers at target.
func hintFor(target string) string {
	if target == "shm://"+api.DefaultRegion {
		return "start one with bin/hecd, or pass --agent"
	}
	return "is hecd running there? check --agent (or $HEC_AGENT)"
}

// rootCause is the innermost error of a chain (the last of joined ones).
func rootCause(err error) string {
	for {
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			if next := u.Unwrap(); next != nil {
				err = next
				continue
			}
		case interface{ Unwrap() []error }:
			if errs := u.Unwrap(); len(errs) > 0 {
				err = errs[len(errs)-1]
				continue
			}
		}
		return err.Error()
	}
}

// firstLine is an error's text up to its first newline.
func firstLine(err error) string {
	line, _, _ := strings.Cut(err.Error(), "\n")
	return line
}
