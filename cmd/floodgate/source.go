package main

import (
	"bufio"
	"bytes"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// source is one log being replayed: its reader, its own parser, and its
// next line, parsed. The record's values point into the reader's buffer:
// they hold until the source reads its following line.
type source struct {
	path  string
	order int // on the command line, to break ties in time
	in    io.Closer
	rd    *bufio.Reader
	p     parser
	r     record
	n     int    // the line number of the line in r
	long  []byte // a line longer than the reader's buffer
	last  int64  // the latest time read
}

func (rp *replayer) open(path string, order int) (*source, error) {
	s := &source{path: path, order: order, p: rp.newParser(), r: record{vals: make([][]byte, rp.nfields)}}
	if path == "-" {
		s.rd = bufio.NewReaderSize(os.Stdin, 1<<20)
		return s, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	s.in, s.rd = f, bufio.NewReaderSize(f, 1<<20)
	return s, nil
}

// next reads the source's next line that parses (counting those that do
// not as bad); false at the end of the log.
func (s *source) next(rp *replayer) (bool, error) {
	for {
		line, err := s.read()
		if len(line) > 0 {
			s.n++
			if s.parse(rp, line) {
				return true, nil
			}
		}
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("%s: %w", s.path, err)
		}
	}
}

func (s *source) read() ([]byte, error) {
	line, err := s.rd.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.long = append(s.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = s.rd.ReadSlice('\n')
			s.long = append(s.long, line...)
		}
		line = s.long
	}
	return line, err
}

// parse reads line into the source's record; false for a line to skip.
func (s *source) parse(rp *replayer, line []byte) bool {
	if rp.prog != nil {
		rp.prog.add(len(line))
	}
	line = bytes.TrimRight(line, "\r\n")
	if len(line) == 0 || (s.n == 1 && rp.o.format == "csv" && bytes.HasPrefix(line, []byte("time"))) {
		return false
	}
	rp.res.Lines++
	clear(s.r.vals)
	if err := s.p.parse(line, &s.r); err != nil {
		rp.bad(s.path, s.n, err)
		return false
	}
	if s.r.t < s.last {
		rp.backwards++
	}
	s.last = max(s.last, s.r.t)
	return true
}

// sources orders the logs by the time of their next line.
type sources []*source

func (h sources) Len() int { return len(h) }
func (h sources) Less(i, j int) bool {
	if h[i].last != h[j].last {
		return h[i].last < h[j].last
	}
	return h[i].order < h[j].order
}
func (h sources) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *sources) Push(x any)   { *h = append(*h, x.(*source)) }
func (h *sources) Pop() any {
	old := *h
	s := old[len(old)-1]
	*h = old[:len(old)-1]
	return s
}

// merge replays the logs, every line in the order of the times, each log's
// lines in their order.
func (rp *replayer) merge(ctx context.Context, logs []string) error {
	var all sources
	defer func() {
		for _, s := range all {
			if s.in != nil {
				s.in.Close()
			}
		}
	}()
	for i, path := range logs {
		s, err := rp.open(path, i)
		if err != nil {
			return err
		}
		all = append(all, s)
	}
	var h sources
	for _, s := range all {
		ok, err := s.next(rp)
		if err != nil {
			return err
		}
		if ok {
			h = append(h, s)
		}
	}
	heap.Init(&h)
	for len(h) > 0 {
		s := h[0]
		rp.decide(ctx, s)
		ok, err := s.next(rp)
		if err != nil {
			return err
		}
		if ok {
			heap.Fix(&h, 0)
		} else {
			heap.Pop(&h)
		}
	}
	return nil
}
