package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progress draws a progress bar of a replay on a terminal.
type progress struct {
	w           io.Writer
	total, read int64
	lines       int64
	began, last time.Time
}

// progressTo returns a progress bar on w when w is a terminal, else nil.
func progressTo(w io.Writer) *progress {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return &progress{w: w}
}

func (p *progress) start(paths []string) {
	for _, path := range paths {
		if st, err := os.Stat(path); err == nil && path != "-" {
			p.total += st.Size()
		}
	}
	p.began = time.Now()
	p.last = p.began
}

// add counts a line of n bytes; every 64Ki lines it redraws the bar, at
// most 10 times a second.
func (p *progress) add(n int) {
	p.read += int64(n)
	p.lines++
	if p.lines&(1<<16-1) != 0 {
		return
	}
	now := time.Now()
	if now.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last = now
	p.draw(now)
}

func (p *progress) draw(now time.Time) {
	rate := float64(p.lines) / max(now.Sub(p.began).Seconds(), 1e-9)
	if p.total <= 0 {
		fmt.Fprintf(p.w, "\r%d lines, %.0f lines/s ", p.lines, rate)
		return
	}
	frac := min(float64(p.read)/float64(p.total), 1)
	const width = 30
	bar := make([]byte, width)
	for i := range bar {
		bar[i] = ' '
		if float64(i) < frac*width {
			bar[i] = '='
		}
	}
	fmt.Fprintf(p.w, "\r[%s] %3.0f%% %d lines, %.0f lines/s ", bar, 100*frac, p.lines, rate)
}

func (p *progress) done() {
	p.draw(time.Now())
	fmt.Fprintln(p.w)
}
