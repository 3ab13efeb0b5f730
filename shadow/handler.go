package shadow

import (
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Handler returns an http.Handler that serves the reports of every
// recorded policy (or of the one named by ?policy=): as JSON (a list of
// [Report]) when the request asks for it (?format=json, or an Accept
// header preferring application/json), else as an HTML page with, per
// policy, a chart of the per-key demand distribution (inline SVG, no
// JavaScript) marking the current limit and the recommendation, the
// numbers and the heaviest keys. It serves GET and HEAD only.
func (r *Recorder) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		reps := r.Reports()
		if name := req.URL.Query().Get("policy"); name != "" {
			var one []Report
			for _, rep := range reps {
				if rep.Policy == name {
					one = append(one, rep)
				}
			}
			if len(one) == 0 {
				http.Error(w, fmt.Sprintf("no recorded policy %q", name), http.StatusNotFound)
				return
			}
			reps = one
		}
		w.Header().Set("Cache-Control", "no-store")
		if wantsJSON(req) {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			_ = enc.Encode(reps)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		pages := make([]pageReport, len(reps))
		for i, rep := range reps {
			pages[i] = pageReport{Report: rep, Chart: chart(rep)}
		}
		_ = page.Execute(w, pageData{At: time.Now().UTC().Format(time.RFC3339), Reports: pages, Error: sketchRelativeError * 100})
	})
}

func wantsJSON(req *http.Request) bool {
	if f := req.URL.Query().Get("format"); f != "" {
		return f == "json"
	}
	acc := req.Header.Get("Accept")
	return strings.Contains(acc, "application/json") && !strings.Contains(acc, "text/html")
}

type pageData struct {
	At      string
	Reports []pageReport
	Error   float64
}

type pageReport struct {
	Report
	Chart template.HTML
}

// chart draws the demand histogram as SVG: bars on a log scale of units
// per window, a line at the current limit and one at the recommendation.
func chart(rep Report) template.HTML {
	const (
		width, height      = 720.0, 260.0
		left, right        = 56.0, 16.0
		top, bottom        = 28.0, 40.0
		plotW, plotH       = width - left - right, height - top - bottom
		currentC, recC, pC = "#c0392b", "#1e8449", "#7f8c8d"
	)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="demand-chart" data-policy="%s" xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img" aria-label="per-key demand of %s">`,
		template.HTMLEscapeString(rep.Policy), width, height, width, height, template.HTMLEscapeString(rep.Policy))
	fmt.Fprintf(&b, `<title>Per-key demand per %v window of %s</title>`, rep.Window, template.HTMLEscapeString(rep.Policy))
	if len(rep.Histogram) == 0 {
		fmt.Fprintf(&b, `<text class="no-data" x="%.0f" y="%.0f" text-anchor="middle">no window with demand has ended yet</text></svg>`, width/2, height/2)
		return template.HTML(b.String())
	}
	lo, hi := rep.Histogram[0].Low, rep.Histogram[len(rep.Histogram)-1].High
	rec := rep.Recommendation
	for _, v := range []float64{float64(rep.Limit), float64(rec.Limit)} {
		if v > 0 {
			lo, hi = math.Min(lo, v), math.Max(hi, v*1.05)
		}
	}
	lo = math.Max(lo*0.9, 0.5)
	x := func(v float64) float64 {
		return left + plotW*(math.Log(math.Max(v, lo))-math.Log(lo))/(math.Log(hi)-math.Log(lo))
	}
	var peak float64
	for _, bin := range rep.Histogram {
		peak = math.Max(peak, bin.KeyWindows)
	}
	fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#fbfcfc" stroke="#d5d8dc"/>`, left, top, plotW, plotH)
	for _, bin := range rep.Histogram {
		x0, x1 := x(bin.Low), x(bin.High)
		h := plotH * bin.KeyWindows / peak
		fmt.Fprintf(&b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#5dade2"><title>%s to %s units: %.0f key-windows</title></rect>`,
			x0, top+plotH-h, math.Max(x1-x0-0.5, 0.5), h, num(bin.Low), num(bin.High), bin.KeyWindows)
	}
	// Ticks at 1, 2, 5 x powers of ten.
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#aab7b8"/><text x="%.1f" y="%.1f" font-size="11" text-anchor="middle" fill="#566573">%s</text>`,
				x(v), top+plotH, x(v), top+plotH+5, x(v), top+plotH+18, num(v))
		}
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12" text-anchor="middle" fill="#2c3e50">units per key per %v window (log scale)</text>`, left+plotW/2, height-6, rep.Window)
	fmt.Fprintf(&b, `<text x="14" y="%.1f" font-size="12" text-anchor="middle" fill="#2c3e50" transform="rotate(-90 14 %.1f)">key-windows</text>`, top+plotH/2, top+plotH/2)
	marker := func(class, color, label string, v float64, row int) {
		if v <= 0 {
			return
		}
		fmt.Fprintf(&b, `<line class="%s" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="6 3"/>`,
			class, x(v), top, x(v), top+plotH, color)
		anchor := "start"
		tx := x(v) + 4
		if tx > left+plotW-150 {
			anchor, tx = "end", x(v)-4
		}
		fmt.Fprintf(&b, `<text class="%s-label" x="%.1f" y="%.1f" font-size="12" fill="%s" text-anchor="%s">%s</text>`,
			class, tx, top+14+14*float64(row), color, anchor, template.HTMLEscapeString(label))
	}
	if rec.OK {
		marker("quantile", pC, fmt.Sprintf("p%s %s", strconv.FormatFloat(rec.Quantile*100, 'f', -1, 64), num(rec.Basis)), rec.Basis, 2)
		marker("recommendation", recC, "recommended "+strconv.FormatInt(rec.Limit, 10), float64(rec.Limit), 1)
	}
	marker("current-limit", currentC, "current "+strconv.FormatInt(rep.Limit, 10), float64(rep.Limit), 0)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// num formats a number of units for people: integers as such, others
// with three significant digits.
func num(v float64) string {
	if math.Abs(v) >= 100 && math.Abs(v) < 1e15 {
		v = math.Round(v)
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"num":    num,
	"pct":    func(f float64) string { return strconv.FormatFloat(100*f, 'f', 2, 64) + "%" },
	"dur":    func(d time.Duration) string { return d.Round(time.Second).String() },
	"mul100": func(f float64) float64 { return math.Round(f*1e4) / 100 },
	"sub":    func(a, b uint64) uint64 { return a - min(b, a) },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>floodgate: measured demand</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#2c3e50}
table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #d5d8dc;padding:.25em .6em;text-align:right}
th{background:#f2f4f4}
td.key,th.key{text-align:left;font-family:monospace}
.refused{color:#c0392b}
section{margin-bottom:3em}
</style></head>
<body>
<h1>Measured demand</h1>
<p>Report at {{.At}}. Quantiles within {{.Error}}% of the sampled keys' values; see the JSON at <a href="?format=json">?format=json</a>.</p>
{{range .Reports}}<section class="policy" id="policy-{{.Policy}}">
<h2>Policy <code>{{.Policy}}</code></h2>
{{.Chart}}
<table class="numbers">
<tr><th>current limit</th><td class="current">{{.Limit}}</td><th>window</th><td>{{.Window}}</td></tr>
<tr><th>observed</th><td class="observed">{{dur .Observed}}</td><th>windows</th><td class="windows">{{.Windows}}</td></tr>
<tr><th>keys (estimated)</th><td class="keys">{{num .Keys}}</td><th>key-windows</th><td class="key-windows{{if .DroppedWindows}} partial{{end}}">{{num .KeyWindows}}{{if .DroppedWindows}}*{{end}}</td></tr>
<tr><th>windows dropped (table overflow)</th><td class="dropped">{{.DroppedWindows}}</td><th></th><td></td></tr>
<tr><th>decisions</th><td class="decisions">{{.Decisions}}</td><th>refused by the current limit</th><td class="refused">{{.Refused}}</td></tr>
<tr><th>units offered</th><td class="units-offered">{{.Units}}</td><th>units admitted</th><td class="units-admitted">{{sub .Units .RefusedUnits}}</td></tr>
<tr><th>sample rate</th><td>{{.SampleRate}}</td><th>units refused</th><td class="refused">{{.RefusedUnits}}</td></tr>
</table>
<table class="quantiles">
<tr><th></th><th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>max</th></tr>
<tr><th>demand per window</th><td class="p50">{{num .Demand.P50}}</td><td class="p90">{{num .Demand.P90}}</td><td class="p95">{{num .Demand.P95}}</td><td class="p99">{{num .Demand.P99}}</td><td class="max">{{num .Demand.Max}}</td></tr>
<tr><th>admitted per window</th><td>{{num .Admitted.P50}}</td><td>{{num .Admitted.P90}}</td><td class="admitted-p95">{{num .Admitted.P95}}</td><td>{{num .Admitted.P99}}</td><td>{{num .Admitted.Max}}</td></tr>
<tr><th>burst (1/8 window)</th><td>{{num .Burst.P50}}</td><td>{{num .Burst.P90}}</td><td>{{num .Burst.P95}}</td><td>{{num .Burst.P99}}</td><td>{{num .Burst.Max}}</td></tr>
</table>
{{range .Notes}}<p class="note">* {{.}}</p>{{end}}
{{with .Recommendation}}{{if .OK}}<table class="recommendation">
<tr><th>recommended limit</th><td class="rec-limit">{{.Limit}}</td><th>recommended burst</th><td class="rec-burst">{{.Burst}}</td></tr>
<tr><th>from</th><td class="rec-from">p{{num (mul100 .Quantile)}} {{num .Basis}} of {{.From}} demand + {{num (mul100 .Headroom)}}%{{if .FewKeys}} (too few keys for a distribution){{end}}</td><th>burst from</th><td>p{{num (mul100 .BurstQuantile)}} {{num .BurstBasis}}</td></tr>
<tr><th>key-windows above it</th><td class="rec-above">{{num .KeyWindowsAbove}} ({{pct .FractionAbove}})</td><th>units it would refuse</th><td class="rec-units">{{num .UnitsAbove}}</td></tr>
</table>{{else}}<p class="no-recommendation">No recommendation yet: {{.Reason}}.</p>{{end}}{{end}}
{{if .Top}}<table class="top"><tr><th class="key">heaviest keys</th><th>peak / window</th><th>current</th><th>units</th><th>refused</th><th>over-count</th><th>above recommendation</th></tr>
{{range .Top}}<tr><td class="key">{{if .Key}}{{.Key}}{{else}}#{{.Hash}}{{end}}</td><td>{{.Peak}}</td><td>{{.Current}}</td><td>{{.Total}}</td><td class="refused">{{.Refused}}</td><td>{{.Overcount}}</td><td>{{if .AboveRecommendation}}yes{{end}}</td></tr>
{{end}}</table>{{end}}
</section>
{{else}}<p>No policy recorded yet.</p>{{end}}
</body></html>
`))
