package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/floodgate-go/floodgate/policy"
)

const diffDoc = `Diff compares two versions of a config (two policy files, or two
envoyproxy/ratelimit configs) and prints what changes: per policy (or Envoy
limit) its parameters, per override the limit its key moves to, the default
plan, and per rule the policy it applies. A change that cuts a limit's rate or
capacity by more than -max-step (30%) in one step is refused (exit 1) unless
-force: tighten in steps, watching the refusals after each. In CI, on the
reviewed config repository:

  floodgate diff <(git show origin/main:limits.yaml) limits.yaml
`

// change is one difference between the old config and the new.
type change struct {
	What string `json:"what"` // policy, limit, override, default_plan, rule
	Name string `json:"name"`
	Kind string `json:"kind"` // added, removed, changed
	Old  string `json:"old,omitempty"`
	New  string `json:"new,omitempty"`
	// Cut is the largest relative cut of the rate or capacity applied
	// (0.5: halved), 0 when nothing is tightened.
	Cut     float64 `json:"cut,omitempty"`
	Refused bool    `json:"refused,omitempty"`
	Note    string  `json:"note,omitempty"`
}

type diffResult struct {
	Old     string   `json:"old"`
	New     string   `json:"new"`
	MaxStep float64  `json:"max_step"`
	Changes []change `json:"changes"`
	Refused int      `json:"refused"`
	Forced  bool     `json:"forced,omitempty"`
}

func runDiff(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("diff", "[flags] OLD NEW", diffDoc, stderr)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	force := fs.Bool("force", false, "report tightenings above -max-step but exit 0")
	maxStep := fs.Float64("max-step", 0.30, "the largest cut of a limit allowed in one step (0.30: 30%)")
	kind := fs.String("kind", "", "read both files as this kind: policy or envoy (default: detect)")
	files, err := parseFlags(fs, args, stdout)
	if err != nil {
		return flagExit(err)
	}
	if len(files) != 2 || *maxStep <= 0 || *maxStep >= 1 {
		fmt.Fprintln(stderr, "floodgate diff: want OLD and NEW, and 0 < -max-step < 1")
		fs.Usage()
		return exitUsage
	}
	var cfgs [2]*configFile
	for i, path := range files {
		cfgs[i], err = loadConfig(path, *kind)
		var rerr errRead
		switch {
		case errors.As(err, &rerr):
			fmt.Fprintln(stderr, "floodgate diff:", err)
			return exitUsage
		case err != nil:
			fmt.Fprintln(stderr, configFinding(path, err))
			return exitFindings
		}
	}
	if cfgs[0].Kind != cfgs[1].Kind {
		fmt.Fprintf(stderr, "floodgate diff: %s is a %s config, %s a %s config\n", files[0], cfgs[0].Kind, files[1], cfgs[1].Kind)
		return exitUsage
	}
	res := diffConfigs(cfgs[0], cfgs[1], *maxStep)
	res.Forced = *force && res.Refused > 0
	if *asJSON {
		writeJSON(stdout, res)
	} else {
		printDiff(stdout, res)
	}
	if res.Refused > 0 && !*force {
		return exitFindings
	}
	return exitOK
}

func printDiff(w io.Writer, res diffResult) {
	if len(res.Changes) == 0 {
		fmt.Fprintf(w, "no change from %s to %s\n", res.Old, res.New)
		return
	}
	for _, c := range res.Changes {
		mark := map[string]string{"added": "+", "removed": "-", "changed": "~"}[c.Kind]
		line := mark + " " + c.What
		if c.Name != "" {
			line += " " + c.Name
		}
		switch {
		case c.Old == "":
			line += ": " + c.New
		case c.New == "":
			line += ": " + c.Old
		default:
			line += ": " + c.Old + " -> " + c.New
		}
		if c.Cut > 0 {
			line += fmt.Sprintf(" (tightened by %.0f%%)", 100*c.Cut)
		}
		if c.Note != "" {
			line += " (" + c.Note + ")"
		}
		if c.Refused {
			line += fmt.Sprintf("\n    REFUSED: more than %.0f%% in one step; tighten in steps, or -force", 100*res.MaxStep)
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "%d change(s), %d refused", len(res.Changes), res.Refused)
	if res.Forced {
		fmt.Fprint(w, " (forced)")
	}
	fmt.Fprintln(w)
}

// diffConfigs compares old and new, of one kind.
func diffConfigs(old, new *configFile, maxStep float64) diffResult {
	res := diffResult{Old: old.Path, New: new.Path, MaxStep: maxStep, Changes: []change{}}
	what := "limit"
	if old.Kind == kindPolicy {
		what = "policy"
	}
	res.Changes = append(res.Changes, diffLimits(what, old.limits(), new.limits())...)
	if old.Kind == kindPolicy {
		res.Changes = append(res.Changes, diffPlans(old, new)...)
	}
	for i := range res.Changes {
		if res.Changes[i].Cut > maxStep+1e-9 {
			res.Changes[i].Refused = true
			res.Refused++
		}
	}
	return res
}

// cut is the relative cut from o to n: of the rate or of the capacity,
// whichever falls more; 0 when neither falls. A dry-run limit cuts
// nothing; one that starts enforcing is reported apart.
func cut(o, n limit) float64 {
	c := 0.0
	if o.PerSec > 0 && n.PerSec < o.PerSec {
		c = 1 - n.PerSec/o.PerSec
	}
	if o.Capacity > 0 && n.Capacity < o.Capacity {
		c = math.Max(c, 1-float64(n.Capacity)/float64(o.Capacity))
	}
	return c
}

func diffLimits(what string, old, new []limit) []change {
	byName := func(ls []limit) map[string]limit {
		m := map[string]limit{}
		for _, l := range ls {
			m[l.Name] = l
		}
		return m
	}
	om, nm := byName(old), byName(new)
	var out []change
	for _, name := range slices.Sorted(maps.Keys(om)) {
		o := om[name]
		n, ok := nm[name]
		switch {
		case !ok:
			out = append(out, change{What: what, Name: name, Kind: "removed", Old: o.Desc})
		case o.Desc != n.Desc:
			c := change{What: what, Name: name, Kind: "changed", Old: o.Desc, New: n.Desc}
			if !n.DryRun {
				c.Cut = cut(o, n)
			}
			switch {
			case o.DryRun && !n.DryRun:
				c.Note = "starts enforcing: its would-be refusals become refusals"
			case o.Algorithm != n.Algorithm:
				c.Note = "algorithm changed: every key starts afresh"
			}
			out = append(out, c)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(nm)) {
		if _, ok := om[name]; !ok {
			c := change{What: what, Name: name, Kind: "added", New: nm[name].Desc}
			if !nm[name].DryRun {
				c.Note = "enforcing from the start; a new limit usually runs in dry run first"
			}
			out = append(out, c)
		}
	}
	return out
}

// diffPlans compares the default plan, the overrides and the rules of two
// policy files: what each key, and each rule, is limited by, and how much
// tighter that is (old parameters in the old file, new in the new one).
func diffPlans(old, new *configFile) []change {
	oc, nc := old.Policy, new.Policy
	lim := func(cfg policy.Config, name string) (limit, string) {
		for _, p := range cfg.Policies {
			if p.Name == name {
				l := policyLimit(p)
				return l, l.Desc
			}
		}
		return limit{}, "no limit"
	}
	moved := func(what, name, o, n string, kind string) change {
		ol, od := lim(oc, o)
		nl, nd := lim(nc, n)
		c := change{What: what, Name: name, Kind: kind, Old: od, New: nd}
		if o != "" && n != "" && !nl.DryRun && !ol.DryRun {
			c.Cut = cut(ol, nl)
		}
		return c
	}
	var out []change
	if oc.DefaultPlan != nc.DefaultPlan {
		out = append(out, moved("default_plan", "", oc.DefaultPlan, nc.DefaultPlan, "changed"))
	}
	keys := slices.Sorted(maps.Keys(oc.Overrides))
	for _, k := range slices.Sorted(maps.Keys(nc.Overrides)) {
		if _, ok := oc.Overrides[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		o, inOld := oc.Overrides[k]
		n, inNew := nc.Overrides[k]
		kind := "changed"
		switch {
		case !inOld:
			kind, o = "added", oc.DefaultPlan
		case !inNew:
			kind, n = "removed", nc.DefaultPlan
		case o == n:
			continue
		}
		c := moved("override", k, o, n, kind)
		out = append(out, c)
	}
	or, nr := flattenRules(oc.Rules), flattenRules(nc.Rules)
	for _, at := range slices.Sorted(maps.Keys(or)) {
		if n, ok := nr[at]; !ok {
			out = append(out, change{What: "rule", Name: at, Kind: "removed", Old: or[at]})
		} else if n != or[at] {
			c := moved("rule", at, strings.TrimPrefix(or[at], "policy "), strings.TrimPrefix(n, "policy "), "changed")
			c.Old, c.New = or[at], n
			out = append(out, c)
		}
	}
	for _, at := range slices.Sorted(maps.Keys(nr)) {
		if _, ok := or[at]; !ok {
			out = append(out, change{What: "rule", Name: at, Kind: "added", New: nr[at]})
		}
	}
	return out
}

// flattenRules maps each rule's path ("destination=image-origin > service")
// to what it applies ("policy origin", "plan", "nested rules only").
func flattenRules(rs []policy.Rule) map[string]string {
	out := map[string]string{}
	var walk func(rs []policy.Rule, path string)
	walk = func(rs []policy.Rule, path string) {
		for _, r := range rs {
			at := path + r.Key
			if r.Value != "" {
				at += "=" + r.Value
			}
			switch {
			case r.Policy != "":
				out[at] = "policy " + r.Policy
			case r.Plan:
				out[at] = "plan"
			default:
				out[at] = "nested rules only"
			}
			walk(r.Rules, at+" > ")
		}
	}
	walk(rs, "")
	return out
}
