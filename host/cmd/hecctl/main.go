package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// version is hecctl's version, set at link time (-X main.version=...).
var version = "dev"

// Exit codes (also in the package doc and the README).
const (
	exitFailed      = 1 // the operation failed
	exitUsage       = 2 // the command line is wrong
	exitUnreachable = 3 // no agent answered at the target
	exitRefused     = 4 // the agent answered and refused
)

// app is one run of hecctl: its global flags and where it writes.
type app struct {
	agentFlag string // --agent, or $HEC_AGENT
	mgmtFlag  string // --mgmt, or $HEC_MGMT
	tokenFlag string // --token-file, or $HEC_TOKEN_FILE
	// --mgmt-ca, --mgmt-cert, --mgmt-key: the management API over HTTPS
	// (mutual TLS with a certificate).
	caFlag, certFlag, keyFlag string
	output                    string // -o: text or json
	verbose                   bool   // -v: the whole error chain
	out                       io.Writer

	// Resolved by target() from the flags, the environment and the
	// records of VMs and clusters.
	agent, mgmt string
	tok         string      // the operator's token for them ("" none)
	tls         *tls.Config // the management API's TLS (nil: plain HTTP)
}

func main() {
	// Ctrl-C, and SIGTERM as timeout, kill and service managers send it:
	// either ends the command's context, so that what it started (a
	// bench's agents and namespaces, which outlive it) is taken down.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := &app{out: os.Stdout}
	root := newRoot(a)
	root.SetArgs(os.Args[1:])
	err := root.ExecuteContext(ctx)
	if err == nil {
		return
	}
	code, msg := explain(err, a)
	fmt.Fprintln(os.Stderr, "hecctl: "+msg)
	os.Exit(code)
}

// global flags and which commands use them; a command that does not use
// one refuses it.
const (
	useAgent = 1 << iota
	useMgmt
	useOutput
)

// uses records which global flags cmd uses.
func uses(cmd *cobra.Command, flags int) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations["uses"] = fmt.Sprint(flags)
	return cmd
}

func usesOf(cmd *cobra.Command) int {
	var n int
	fmt.Sscan(cmd.Annotations["uses"], &n)
	return n
}

func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "hecctl",
		Short: "the operator's CLI for a HEC agent",
		Long: `hecctl talks to a HEC agent (hecd): over its handoff (shared memory or TCP)
and its management API. With no flags it finds the local agent on the
defaults (shm:///dev/shm/hec0, management 127.0.0.1:7600). --agent names
another (a VM's or a cluster node's management address follows from it);
HEC_AGENT and HEC_MGMT set them from the environment.

Exit codes: 0 done, 1 the operation failed, 2 a usage error,
3 no agent answered, 4 the agent refused.`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return a.check(cmd) },
	}
	root.SetOut(os.Stdout)
	root.SetErr(os.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&a.agentFlag, "agent", os.Getenv("HEC_AGENT"), "the agent: shm:///dev/shm/NAME, tcp://HOST:PORT, a path or HOST:PORT ($HEC_AGENT; default shm:///dev/shm/hec0)")
	pf.StringVar(&a.mgmtFlag, "mgmt", os.Getenv("HEC_MGMT"), "its management API, HOST:PORT ($HEC_MGMT; default from --agent, else 127.0.0.1:7600)")
	pf.StringVar(&a.tokenFlag, "token-file", os.Getenv("HEC_TOKEN_FILE"), "the operator's token for the agent ($HEC_TOKEN_FILE, or the token itself in $HEC_TOKEN; default the VM's or cluster's, for agents hecctl started)")
	pf.StringVar(&a.caFlag, "mgmt-ca", "", "the management API is HTTPS, its certificate signed by this CA (PEM)")
	pf.StringVar(&a.certFlag, "mgmt-cert", "", "client certificate for the management API (PEM; mutual TLS; implies HTTPS)")
	pf.StringVar(&a.keyFlag, "mgmt-key", "", "the private key of --mgmt-cert (PEM)")
	pf.StringVarP(&a.output, "output", "o", "text", "output format: text or json")
	pf.BoolVarP(&a.verbose, "verbose", "v", false, "on failure, print the whole error chain")
	root.AddCommand(statusCmd(a), collCmd(a), pingCmd(a), checksumCmd(a), railsCmd(a), metricsCmd(a), kvCmd(a), inspectCmd(a),
		aclCmd(a), clusterCmd(a), qemuCmd(a), ecCmd(a), flashCmd(a), keysCmd(a), traceCmd(a), versionCmd(a))
	return root
}

// check refuses global flags the command does not use and a bad -o, then
// resolves the targets.
func (a *app) check(cmd *cobra.Command) error {
	u := usesOf(cmd)
	for _, g := range []struct {
		name string
		bit  int
	}{{"agent", useAgent}, {"mgmt", useMgmt}, {"output", useOutput}} {
		if f := cmd.Flags().Lookup(g.name); f != nil && f.Changed && u&g.bit == 0 {
			return usageError{fmt.Errorf("--%s is not used by %q", g.name, cmd.CommandPath())}
		}
	}
	if a.output != "text" && a.output != "json" {
		return usageError{fmt.Errorf("-o %q: want text or json", a.output)}
	}
	if u&(useAgent|useMgmt) != 0 {
		return a.resolve()
	}
	return nil
}

// jsonOut reports whether -o json was asked for.
func (a *app) jsonOut() bool { return a.output == "json" }

// printJSON writes v as indented JSON.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// usageError is a command line hecctl cannot run.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// wantArgs checks the number of positional arguments, naming them.
func wantArgs(min, max int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < min || (max >= 0 && len(args) > max) {
			return usageError{fmt.Errorf("%s: want %s, got %d argument(s)", cmd.CommandPath(), names, len(args))}
		}
		return nil
	}
}

var errUnknownSub = errors.New("unknown subcommand")

// groupCmd is a command whose subcommands do the work: run alone, it
// shows its help; with an unknown subcommand it is a usage error.
func groupCmd(use, short string) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("%s %s: %w (want %s)", cmd.CommandPath(), args[0], errUnknownSub, subNames(cmd))}
			}
			return cmd.Help()
		}}
}

func subNames(cmd *cobra.Command) string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return strings.Join(names, ", ")
}

func versionCmd(a *app) *cobra.Command {
	return uses(&cobra.Command{Use: "version", Short: "hecctl's version", Args: wantArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.jsonOut() {
				return a.printJSON(map[string]string{"version": version})
			}
			fmt.Fprintln(a.out, "hecctl", version)
			return nil
		}}, useOutput)
}
