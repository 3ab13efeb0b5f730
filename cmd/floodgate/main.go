package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
)

// versionLine names the command's module version and the floodgate
// library's, as the build recorded them: "floodgate v0.1.0 (floodgate
// library v0.1.0)" when installed with go install ...@v0.1.0, "(devel)" when
// built from a checkout.
func versionLine() string {
	v, lib := "(devel)", "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = bi.Main.Version
		for _, d := range bi.Deps {
			if d.Path == "github.com/floodgate-go/floodgate" {
				lib = d.Version
				if d.Replace != nil {
					lib += " => " + d.Replace.Path
				}
			}
		}
	}
	return "floodgate " + v + " (floodgate library " + lib + ")"
}

// The exit codes of every subcommand.
const (
	exitOK       = 0 // nothing to report
	exitFindings = 1 // the input is wrong, or a gate refused it
	exitUsage    = 2 // a usage error, or input that could not be read
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is one subcommand.
type command struct {
	name, args, summary string
	run                 func(args []string, stdout, stderr io.Writer) int
}

var commands []command

func init() {
	commands = []command{
		{"check", "[flags] FILE...", "load and validate policy files and envoyproxy/ratelimit configs", runCheck},
		{"diff", "[flags] OLD NEW", "compare two configs; refuse a tightening above 30% in one step", runDiff},
		{"replay", "--config FILE [flags] LOG...", "decide access logs through a candidate config, offline", runReplay},
		{"report", "[flags] URL|FILE", "render a recorder's demand report", runReport},
		{"version", "", "print the command's version", func(_ []string, stdout, _ io.Writer) int {
			fmt.Fprintln(stdout, versionLine())
			return exitOK
		}},
	}
}

// run runs the command line args and returns the exit code: 0 on success,
// 1 when what was checked is wrong (or a gate refused it), 2 on a usage or
// input error.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			return run([]string{args[1], "-h"}, stdout, stderr)
		}
		usage(stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "floodgate: unknown command %q\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: floodgate <command> [arguments]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, exitCodes, "\nRun \"floodgate <command> -h\" for a command's flags.\n")
}

const exitCodes = `
exit codes:
  0  success: nothing wrong
  1  findings: a config error (or a warning with -strict), a refused diff,
     a replay over its -max-refused
  2  usage error, or input that cannot be read
`

// newFlags returns a subcommand's flag set, its help text written to stderr.
func newFlags(name, args, doc string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: floodgate %s %s\n\n%s\nflags:\n", name, args, doc)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), exitCodes)
	}
	return fs
}

// parseFlags parses args, flags and operands mixed ("check a.yaml -json"),
// and returns the operands. A -h prints the help to stdout and returns
// flag.ErrHelp; a wrong flag prints the error and the help to stderr.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) ([]string, error) {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" || a == "--h" {
			out := fs.Output()
			fs.SetOutput(stdout)
			fs.Usage()
			fs.SetOutput(out)
			return nil, flag.ErrHelp
		}
	}
	var operands []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return operands, nil
		}
		if args[0] == "--" {
			return append(operands, args[1:]...), nil
		}
		operands = append(operands, args[0])
		args = args[1:]
	}
}

// flagExit is the exit code of a flag parsing error: 0 for -h, else 2.
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// multiFlag is a flag that may be given several times.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }
