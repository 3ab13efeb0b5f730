package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/internal/simulate"
)

var bg = context.Background()

// Chart geometry, in SVG user units.
const (
	chartW  = 960
	panelH  = 170
	gap     = 46
	left    = 70
	right   = 190
	top     = 50
	plotW   = chartW - left - right
	nPanels = 4
)

var classColors = []string{"#c0392b", "#2471a3", "#7d8c8d", "#8e44ad", "#d68910", "#229954"}

// series is one line of a panel.
type series struct {
	name  string
	color string
	dash  bool
	ys    []float64
}

// panel is one chart with its own y axis.
type panel struct {
	title string
	unit  string
	lines []series
}

func writeChart(path, title string, names []string, sc scenario, ws []simulate.Window) error {
	n := len(ws)
	perClass := func(f func(w simulate.Window, c int) float64) []series {
		var out []series
		for c, name := range names {
			s := series{name: name, color: classColors[c%len(classColors)], ys: make([]float64, n)}
			for i, w := range ws {
				s.ys[i] = f(w, c)
			}
			out = append(out, s)
		}
		return out
	}
	capacity := series{name: "server capacity", color: "#000", dash: true, ys: make([]float64, n)}
	workers := series{name: "server workers", color: "#000", dash: true, ys: make([]float64, n)}
	limit := series{name: "limit", color: "#d35400", ys: make([]float64, n)}
	inflight := series{name: "in flight", color: "#117864", ys: make([]float64, n)}
	for i, w := range ws {
		capacity.ys[i] = sc.server.Capacity()
		workers.ys[i] = float64(sc.server.Workers)
		limit.ys[i] = float64(w.Limit)
		inflight.ys[i] = float64(w.InFlight)
	}
	panels := []panel{
		{"Offered load per class", "req/s", append(perClass(func(w simulate.Window, c int) float64 { return float64(w.Offered[c]) }), capacity)},
		{"Served (successes) per class", "req/s", append(perClass(func(w simulate.Window, c int) float64 { return float64(w.Succeeded[c]) }), capacity)},
		{"Concurrency limit and requests in flight", "requests", []series{limit, inflight, workers}},
		{"p99 latency per class (gaps: nothing served)", "ms", perClass(func(w simulate.Window, c int) float64 {
			if w.Succeeded[c] == 0 {
				return math.NaN()
			}
			return float64(w.P99[c]) / float64(time.Millisecond)
		})},
	}
	var b strings.Builder
	height := top + nPanels*(panelH+gap)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", chartW, height, chartW, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", left, esc(title))
	for i, p := range panels {
		drawPanel(&b, p, top+i*(panelH+gap), n, sc)
	}
	b.WriteString("</svg>\n")
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func drawPanel(b *strings.Builder, p panel, y0, n int, sc scenario) {
	ymax := 0.0
	for _, s := range p.lines {
		for _, v := range s.ys {
			if !math.IsNaN(v) {
				ymax = math.Max(ymax, v)
			}
		}
	}
	ymax = niceCeil(ymax * 1.05)
	xOf := func(i int) float64 { return left + float64(i)*plotW/float64(max(n-1, 1)) }
	yOf := func(v float64) float64 { return float64(y0+panelH) - v/ymax*panelH }
	// Spike band, frame, title.
	fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#fdebd0"/>`+"\n", xOf(sc.from), y0, xOf(sc.to)-xOf(sc.from), panelH)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", left, y0, plotW, panelH)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", left, y0-8, esc(p.title))
	// Y ticks.
	for k := 0; k <= 4; k++ {
		v := ymax * float64(k) / 4
		y := yOf(v)
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", left, left+plotW, y, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+4, trim(v))
	}
	fmt.Fprintf(b, `<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">%s</text>`+"\n", y0+panelH/2, y0+panelH/2, esc(p.unit))
	// X ticks every 10 windows (1 window = 1 s).
	for i := 0; i < n; i += 10 {
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%ds</text>`+"\n", xOf(i), y0+panelH+15, i)
	}
	// Lines and legend.
	for k, s := range p.lines {
		dash := ""
		if s.dash {
			dash = ` stroke-dasharray="5,4"`
		}
		// One polyline per run of defined values (NaN leaves a gap).
		var pts strings.Builder
		flush := func() {
			if pts.Len() > 0 {
				fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.8"%s points="%s"/>`+"\n", s.color, dash, strings.TrimSpace(pts.String()))
				pts.Reset()
			}
		}
		for i, v := range s.ys {
			if math.IsNaN(v) {
				flush()
				continue
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", xOf(i), yOf(v))
		}
		flush()
		ly := y0 + 14 + k*18
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", left+plotW+12, left+plotW+36, ly-4, ly-4, s.color, dash)
		fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", left+plotW+42, ly, esc(s.name))
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func trim(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
