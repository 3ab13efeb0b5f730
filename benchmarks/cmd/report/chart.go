package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// chart draws one horizontal bar per library for every table measured in
// ns/op, on a log scale so that 30 ns and 70 us fit on one picture.
func chart(res []result) string {
	type bar struct {
		label string
		v     float64
		ours  bool
	}
	type section struct {
		title string
		bars  []bar
	}
	var secs []section
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, t := range tables(res) {
		var s section
		s.title = t.group
		if t.cas != "" {
			s.title += " / " + t.cas
		}
		for _, r := range t.rows {
			v, ok := r.metrics["ns/op"]
			if !ok || v <= 0 || r.metrics["B/key"] != 0 || isFloor(r.lib) {
				continue // floors are not libraries: the tables show them
			}
			s.bars = append(s.bars, bar{r.lib, v, isOurs(r.lib)})
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		if len(s.bars) > 0 {
			secs = append(secs, s)
		}
	}
	if len(secs) == 0 {
		return `<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>`
	}
	const (
		width  = 860
		left   = 230
		right  = 90
		barH   = 14
		gap    = 4
		titleH = 22
	)
	lmin := math.Floor(math.Log10(lo))
	lmax := math.Ceil(math.Log10(hi))
	if lmax <= lmin {
		lmax = lmin + 1
	}
	x := func(v float64) float64 {
		return left + (math.Log10(v)-lmin)/(lmax-lmin)*(width-left-right)
	}
	height := 40
	for _, s := range secs {
		height += titleH + len(s.bars)*(barH+gap) + 6
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14" font-weight="bold">ns/op per library (log scale, lower is better)</text>`+"\n", left)
	for p := lmin; p <= lmax; p++ {
		xx := x(math.Pow(10, p))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="26" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", xx, xx, height-4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#888" text-anchor="middle">%s</text>`+"\n", xx, height-8+4, fmtNs(math.Pow(10, p)))
	}
	y := 40
	for _, s := range secs {
		fmt.Fprintf(&b, `<text x="4" y="%d" font-weight="bold">%s</text>`+"\n", y+14, html.EscapeString(s.title))
		y += titleH
		for _, br := range s.bars {
			color := "#9aa5b1"
			if br.ours {
				color = "#1f77b4"
			}
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-6, y+barH-3, html.EscapeString(br.label))
			w := x(br.v) - left
			if w < 1 {
				w = 1
			}
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", left, y, w, barH, color)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(left)+w+4, y+barH-3, fmtNs(br.v))
			y += barH + gap
		}
		y += 6
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func fmtNs(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.3g ms", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3g µs", v/1e3)
	default:
		return fmt.Sprintf("%.3g ns", v)
	}
}
