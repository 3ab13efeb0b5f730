package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/floodgate-go/floodgate/shadow"
)

// printReport renders one recorder report for a terminal.
func printReport(w io.Writer, r shadow.Report, dryRun bool) {
	head := fmt.Sprintf("%s: limit %d per %v", r.Policy, r.Limit, r.Window)
	if dryRun {
		head += " (dry run)"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintf(w, "  observed %v (%d windows), %s decisions, %s units, %s refused (%s), ~%s keys\n",
		r.Observed.Round(1e9), r.Windows, count(r.Decisions), count(r.Units), count(r.Refused),
		percent(r.Refused, r.Decisions), count(uint64(r.Keys)))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  per key and window\tp50\tp90\tp95\tp99\tmax\t\n")
	for _, q := range []struct {
		name string
		q    shadow.Quantiles
	}{{"demand", r.Demand}, {"burst (1/8 window)", r.Burst}, {"admitted", r.Admitted}} {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t\n", q.name, num(q.q.P50), num(q.q.P90), num(q.q.P95), num(q.q.P99), num(q.q.Max))
	}
	tw.Flush()
	refused := topRefused(r.Top)
	if len(refused) > 0 {
		fmt.Fprintln(w, "  refused by key (heaviest keys):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "    key\trefused\tpeak/window\ttotal\n")
		for _, k := range refused {
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\n", keyName(k), count(k.Refused), count(k.Peak), count(k.Total))
		}
		tw.Flush()
	}
	if len(r.Histogram) > 0 {
		fmt.Fprintln(w, "  demand distribution (key-windows):")
		histogram(w, r)
	}
	fmt.Fprintln(w, "  recommendation:", r.Recommendation)
	for _, n := range r.Notes {
		fmt.Fprintln(w, "  note:", n)
	}
}

// topRefused lists the heaviest keys that were refused, most refused first.
func topRefused(top []shadow.Key) []shadow.Key {
	var out []shadow.Key
	for _, k := range top {
		if k.Refused > 0 {
			out = append(out, k)
		}
	}
	slices.SortStableFunc(out, func(a, b shadow.Key) int { return compareDesc(a.Refused, b.Refused) })
	return out
}

func compareDesc(a, b uint64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

func keyName(k shadow.Key) string {
	if k.Key != "" {
		return k.Key
	}
	return "#" + k.Hash
}

// histogram draws the demand histogram as bars, the limit and the
// recommendation marked on their bins.
func histogram(w io.Writer, r shadow.Report) {
	most := 0.0
	for _, b := range r.Histogram {
		most = max(most, b.KeyWindows)
	}
	if most == 0 {
		return
	}
	const width = 40
	for _, b := range r.Histogram {
		mark := ""
		if r.Limit > 0 && float64(r.Limit) >= b.Low && float64(r.Limit) < b.High {
			mark += " <- limit"
		}
		if rec := r.Recommendation; rec.OK && float64(rec.Limit) >= b.Low && float64(rec.Limit) < b.High {
			mark += " <- recommended"
		}
		if b.KeyWindows == 0 && mark == "" {
			continue
		}
		bar := ""
		if b.KeyWindows > 0 {
			bar = strings.Repeat("#", max(int(b.KeyWindows/most*width), 1))
		}
		fmt.Fprintf(w, "    %8s..%-8s %-*s %s%s\n", num(b.Low), num(b.High), width, bar, num(b.KeyWindows), mark)
	}
}

// count prints n with thousands separators.
func count(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func percent(part, whole uint64) string {
	if whole == 0 {
		return "0%"
	}
	return strconv.FormatFloat(100*float64(part)/float64(whole), 'f', 2, 64) + "%"
}

// num prints a figure of a report: whole numbers as such, small ones
// with two decimals.
func num(v float64) string {
	if v >= 100 || v == float64(int64(v)) {
		return count(uint64(v + 0.5))
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
