package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/floodgate-go/floodgate/policy"
)

const checkDoc = `Check loads every FILE, a floodgate policy file or an envoyproxy/ratelimit
config (told apart by its top-level "descriptors" key, or by -kind), with
the loaders the library and the rls service use, and prints each file's
first error (the loaders stop there) as file:line. A directory stands for its .yaml and .yml files, as the rls
service reads its config directory. Then it warns about what loads but should not ship:

  dry-run        a dry-run (shadow-mode) limit: it never refuses anyone
  unused         a policy no rule, override or default plan applies
  unnamed        a limit on a shared store without a name of its own: a
                 policy file without a domain (two services on one Redis
                 would share budgets), an Envoy rate_limit without name
                 (its state and headers follow its descriptor path)
  edge-origin    an Envoy (edge) limit below 5x the tightest policy-file
                 (origin) limit, when both are given: the edge would refuse
                 what the origin admits; set it at 5 to 10 times that limit
  burst-zero     a leaky bucket with burst 0: a key's second request within
                 one interval is refused, which a bursty path (page loads,
                 batch clients, retries) cannot live with
  same-name      two Envoy rate_limits with one name: the service advertises
                 them as one RateLimit-Policy member and its observer counts
                 them under one policy label

Limits on a store shared by several processes: pass -shared (leased limits
imply it).
`

// finding is an error or a warning at a file's line.
type finding struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Code string `json:"code,omitempty"`
	Msg  string `json:"message"`
}

func (f finding) String() string {
	s := f.File + ":" + strconv.Itoa(f.Line) + ": "
	if f.Code != "" {
		s += "warning: "
	}
	s += f.Msg
	if f.Code != "" {
		s += " [" + f.Code + "]"
	}
	return s
}

type checkResult struct {
	Files    []checkedFile `json:"files"`
	Errors   []finding     `json:"errors"`
	Warnings []finding     `json:"warnings"`
}

type checkedFile struct {
	Path   string  `json:"path"`
	Kind   string  `json:"kind"`
	Domain string  `json:"domain,omitempty"`
	Limits []limit `json:"limits"`
}

func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("check", "[flags] FILE...", checkDoc, stderr)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	strict := fs.Bool("strict", false, "exit 1 on warnings too")
	shared := fs.Bool("shared", false, "the limits run on a store shared by several processes (Redis)")
	kind := fs.String("kind", "", "read every FILE as this kind: policy or envoy (default: detect)")
	files, err := parseFlags(fs, args, stdout)
	if err != nil {
		return flagExit(err)
	}
	if len(files) == 0 {
		fmt.Fprintln(stderr, "floodgate check: no FILE given")
		fs.Usage()
		return exitUsage
	}
	files, err = expandDirs(files)
	if err != nil {
		fmt.Fprintln(stderr, "floodgate check:", err)
		return exitUsage
	}
	res := checkResult{Errors: []finding{}, Warnings: []finding{}}
	var loaded []*configFile
	for _, path := range files {
		f, err := loadConfig(path, *kind)
		var rerr errRead
		if errors.As(err, &rerr) {
			fmt.Fprintln(stderr, "floodgate check:", err)
			return exitUsage
		}
		if err != nil {
			res.Errors = append(res.Errors, configFinding(path, err))
			continue
		}
		loaded = append(loaded, f)
		cf := checkedFile{Path: f.Path, Kind: f.Kind, Limits: f.limits()}
		if f.Kind == kindPolicy {
			cf.Domain = f.Policy.Domain
		} else {
			cf.Domain = f.Envoy.Name
		}
		res.Files = append(res.Files, cf)
	}
	res.Errors = append(res.Errors, duplicateDomains(loaded)...)
	res.Warnings = warnings(loaded, *shared)
	if *asJSON {
		writeJSON(stdout, res)
	} else {
		printCheck(stdout, res)
	}
	if len(res.Errors) > 0 || (*strict && len(res.Warnings) > 0) {
		return exitFindings
	}
	return exitOK
}

func printCheck(w io.Writer, res checkResult) {
	for _, e := range res.Errors {
		fmt.Fprintln(w, e)
	}
	for _, e := range res.Warnings {
		fmt.Fprintln(w, e)
	}
	n := 0
	for _, f := range res.Files {
		n += len(f.Limits)
	}
	fmt.Fprintf(w, "%d file(s) loaded, %d limit(s): %d error(s), %d warning(s)\n",
		len(res.Files), n, len(res.Errors), len(res.Warnings))
}

// expandDirs replaces each directory of paths by its .yaml and .yml files,
// in name order (as rls.LoadDir reads a config directory: not its
// subdirectories).
func expandDirs(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil || !st.IsDir() {
			out = append(out, p) // the loader reports what is wrong
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		n := len(out)
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
				out = append(out, filepath.Join(p, e.Name()))
			}
		}
		if len(out) == n {
			return nil, fmt.Errorf("%s: no .yaml or .yml file", p)
		}
	}
	return out, nil
}

// configFinding turns a loader's error into a finding at its line.
func configFinding(path string, err error) finding {
	var ce *policy.ConfigError
	if errors.As(err, &ce) {
		return finding{File: ce.File, Line: ce.Line, Msg: ce.Msg}
	}
	return finding{File: path, Line: 1, Msg: err.Error()}
}

// duplicateDomains reports two Envoy configs of one domain, which the
// service refuses (one file per domain).
func duplicateDomains(files []*configFile) []finding {
	var out []finding
	seen := map[string]string{}
	for _, f := range files {
		if f.Kind != kindEnvoy {
			continue
		}
		if first, dup := seen[f.Envoy.Name]; dup {
			out = append(out, finding{File: f.Path, Line: 1, Msg: fmt.Sprintf("duplicate domain '%s' (also in %s)", f.Envoy.Name, first)})
			continue
		}
		seen[f.Envoy.Name] = f.Path
	}
	return out
}

// warnings returns the warnings of the loaded files, file by file, then
// those that compare the edge's limits with the origin's.
func warnings(files []*configFile, shared bool) []finding {
	out := []finding{}
	for _, f := range files {
		ls := f.limits()
		leased := false
		for _, l := range ls {
			leased = leased || l.Leased
			if l.DryRun {
				out = append(out, finding{File: l.File, Line: l.Line, Code: "dry-run",
					Msg: fmt.Sprintf("%s is in dry run: it never refuses; enforce it once its report covers a full traffic cycle", l.Name)})
			}
			if l.Algorithm == string(policy.LeakyBucket) && l.Capacity == 0 {
				out = append(out, finding{File: l.File, Line: l.Line, Code: "burst-zero",
					Msg: fmt.Sprintf("%s has burst 0: a key's second request within %s is refused; give a bursty path a burst", l.Name, interval(l.PerSec))})
			}
		}
		if f.Kind == kindPolicy {
			out = append(out, unusedPolicies(f)...)
			if (shared || leased) && f.Policy.Domain == "" {
				out = append(out, finding{File: f.Path, Line: 1, Code: "unnamed",
					Msg: "no domain on a shared store: another service with a policy of the same name would share its budgets; set domain:"})
			}
			continue
		}
		for _, l := range ls {
			if (shared || l.Leased) && !l.Named {
				out = append(out, finding{File: l.File, Line: l.Line, Code: "unnamed",
					Msg: fmt.Sprintf("%s has no name on a shared store: its state and headers follow its descriptor path, which an edit of the tree moves; give it name:", l.Name)})
			}
		}
	}
	out = append(out, sameName(files)...)
	return append(out, edgeOrigin(files)...)
}

// sameName warns about every Envoy rate_limit whose name an earlier one
// (in file order) already has.
func sameName(files []*configFile) []finding {
	first := map[string]limit{}
	var out []finding
	for _, f := range files {
		if f.Kind != kindEnvoy {
			continue
		}
		for _, l := range f.limits() {
			if l.Own == "" {
				continue
			}
			if p, ok := first[l.Own]; ok {
				out = append(out, finding{File: l.File, Line: l.Line, Code: "same-name",
					Msg: fmt.Sprintf("%s is named %q like %s (%s): one RateLimit-Policy member and one observer label for two limits; give each its own name", l.Name, l.Own, p.Name, p.at())})
				continue
			}
			first[l.Own] = l
		}
	}
	return out
}

// interval is the time between two requests at perSec, for messages.
func interval(perSec float64) string {
	if perSec <= 0 {
		return "an interval"
	}
	return fmtDuration(1 / perSec)
}

// unusedPolicies lists the policies of a policy file that nothing applies.
func unusedPolicies(f *configFile) []finding {
	used := map[string]bool{f.Policy.DefaultPlan: true}
	for _, p := range f.Policy.Overrides {
		used[p] = true
	}
	var walk func(rs []policy.Rule)
	walk = func(rs []policy.Rule) {
		for _, r := range rs {
			used[r.Policy] = true
			walk(r.Rules)
		}
	}
	walk(f.Policy.Rules)
	var out []finding
	for _, p := range f.Policy.Policies {
		if !used[p.Name] {
			out = append(out, finding{File: f.Path, Line: policyLine(f.text, p.Name), Code: "unused",
				Msg: fmt.Sprintf("policy %q is applied by no rule, override or default plan (only a resolver could place keys on it)", p.Name)})
		}
	}
	return out
}

// edgeOrigin warns about every enforcing Envoy limit below five times the
// tightest enforcing policy-file limit.
func edgeOrigin(files []*configFile) []finding {
	var tight *limit
	for _, f := range files {
		if f.Kind != kindPolicy {
			continue
		}
		for _, l := range f.limits() {
			if !l.DryRun && l.PerSec > 0 && (tight == nil || l.PerSec < tight.PerSec) {
				tight = &l
			}
		}
	}
	if tight == nil {
		return nil
	}
	var out []finding
	for _, f := range files {
		if f.Kind != kindEnvoy {
			continue
		}
		for _, l := range f.limits() {
			if l.DryRun || l.PerSec <= 0 || l.PerSec >= 5*tight.PerSec {
				continue
			}
			how := "below 5x the tightest origin limit %s (%s/s, %s): the edge should only stop floods, the origin answers with its own limits"
			if l.PerSec < tight.PerSec {
				how = "tighter than the tightest origin limit %s (%s/s, %s): the edge refuses what the origin admits"
			}
			out = append(out, finding{File: l.File, Line: l.Line, Code: "edge-origin",
				Msg: fmt.Sprintf("edge limit %s (%s/s) is "+how+"; set it at 5-10x, %s/s to %s/s",
					l.Name, fmtRate(l.PerSec), tight.Name, fmtRate(tight.PerSec), tight.at(), fmtRate(5*tight.PerSec), fmtRate(10*tight.PerSec))})
		}
	}
	return out
}
