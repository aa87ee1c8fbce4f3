// Command ringxdsctl is the operator's what-if tool for ringxds:
//
//	ringxdsctl pick   where a key goes on each data plane, offline
//	ringxdsctl diff   how many keys, per cluster and data plane, a change of the endpoints file moves
//	ringxdsctl status which clients each control plane replica serves, its build, and their ACK/NACK state (CSDS)
//
// pick and diff read endpoints files through the same parsing, translation
// and ring code as xds-server (watch.ParseFile, snapshot.Build, and the
// rings each data plane decodes from the published resources, package
// predict), so their answers are the server's. docs/ringxdsctl.md has the
// details.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/ringxds/ringxds/internal/buildinfo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usageText = `Usage: ringxdsctl <command> [flags]

Commands:
  pick    where a key goes on each data plane, from an endpoints file (offline)
  diff    the keys a change of the endpoints file moves, per cluster and data plane (offline)
  status  the clients of each xds-server replica, its build and their ACK/NACK state (CSDS)
  version this tool's build

Run "ringxdsctl <command> --help" for a command's flags. Output is a table;
-o json gives JSON for scripts.
`

// usageError is a mistake on the command line: exit status 2. reported
// is set when the flag package already printed it, with the usage.
type usageError struct {
	error
	reported bool
}

// run executes one command and returns the exit status: 0, 1 when the
// command failed, 2 for a usage mistake.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return 2
	}
	var err error
	switch cmd := args[0]; cmd {
	case "pick":
		err = runPick(args[1:], stdout, stderr)
	case "diff":
		err = runDiff(args[1:], stdout, stderr)
	case "status":
		err = runStatus(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprint(stdout, buildinfo.Read().Text("ringxdsctl"))
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usageText)
	default:
		fmt.Fprintf(stderr, "ringxdsctl: unknown command %q\n\n%s", cmd, usageText)
		return 2
	}
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		if !ue.reported {
			fmt.Fprintf(stderr, "ringxdsctl %s: %v (see ringxdsctl %s --help)\n", args[0], err, args[0])
		}
		return 2
	}
	fmt.Fprintf(stderr, "ringxdsctl %s: %v\n", args[0], err)
	return 1
}

// newFlags is a command's flag set, printing its usage to stderr.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("ringxdsctl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: ringxdsctl %s\n\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs parses flags wherever they stand among the arguments, so that
// "diff before.yaml after.yaml --keys keys.txt" works as well as flags
// first, and returns the other arguments in order.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err, true}
		}
		args = fs.Args()
		if len(args) == 0 {
			return rest, nil
		}
		rest, args = append(rest, args[0]), args[1:]
	}
}

// outputFlag adds -o to fs.
func outputFlag(fs *flag.FlagSet) *string {
	return fs.String("o", "table", "output format: table or json")
}

func checkOutput(o string) error {
	if o != "table" && o != "json" {
		return usageError{error: fmt.Errorf("-o %q: want table or json", o)}
	}
	return nil
}
