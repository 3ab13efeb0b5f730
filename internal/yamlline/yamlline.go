// Package yamlline finds the line of a YAML syntax error.
//
// yaml.v3 names, for most syntax errors, the line of the construct that
// encloses the mistake, and for parser errors the line before it: an
// unclosed '{' on line 6 is reported at line 5, a misindented field on
// line 8 at the line above the block that holds it, an error on the first
// line at no line at all. The message is right; Locate finds the line.
package yamlline

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxWalk bounds the line-by-line walk back from where yaml.v3 stopped;
// past it the rest of the run is bisected.
const maxWalk = 64

// Locate returns the line of what is wrong in b, which yaml.v3 refused
// with err, and err's message without yaml.v3's "yaml: line N: " prefix.
//
// The line is found from the text, in two steps. First, where yaml.v3
// stops: b is read again one byte at a time, and the last line read
// before the same error is the line of the token the parser could not
// take (or a line after it, read ahead). Then, back from that line, the
// first line of the run of lines each of which ends a prefix of b that
// fails with the same message: a prefix that still holds the token fails
// the same way, and so does one cut right after the last good token when
// what is missing is a ',' or a closing bracket (a prefix cut after a
// ',' or an opening bracket fails with another message). So an unclosed
// '{' is found at its line, a missing ',' at the line that lacks it, a
// misindented key at its line, an unterminated string at its opening
// quote. When the text read again does not fail the same way, the line is
// yaml.v3's (at least 1).
func Locate(b []byte, err error) (int, string) {
	reported, msg := split(err)
	lines := bytes.SplitAfter(b, []byte("\n"))
	stop := stopLine(b, msg)
	if stop == 0 {
		return max(reported, 1), msg
	}
	fails := func(k int) bool {
		var n yaml.Node
		err := yaml.Unmarshal(bytes.Join(lines[:k], nil), &n)
		if err == nil {
			return false
		}
		_, m := split(err)
		return m == msg
	}
	// fails(stop) holds: that prefix holds every byte the parser read.
	k := stop
	for i := 0; i < maxWalk && k > 1 && fails(k-1); i++ {
		k--
	}
	if k <= 1 || !fails(k-1) {
		return k, msg
	}
	// A long run (an unterminated string or block): bisect it between
	// the line before the construct yaml.v3 names, which does not fail
	// so, and k, which does.
	lo, hi := max(reported-1, 0), k-1
	if lo >= hi || fails(lo) {
		return hi, msg
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, msg
}

// split splits yaml.v3's "yaml: line N: what" into N and what (N 0 when
// the error names no line).
func split(err error) (int, string) {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "yaml: line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				return n, strings.TrimSpace(rest[i+1:])
			}
		}
	}
	return 0, strings.TrimPrefix(msg, "yaml: ")
}

// stopLine parses b again, handing the parser one byte at a time, and
// returns the line of the last byte it read before failing with msg (0
// when it does not fail so).
func stopLine(b []byte, msg string) int {
	r := &byteReader{b: b}
	var n yaml.Node
	err := yaml.NewDecoder(r).Decode(&n)
	if err == nil || errors.Is(err, io.EOF) {
		return 0
	}
	if _, m := split(err); m != msg {
		return 0
	}
	if r.n == 0 {
		return 1
	}
	return 1 + bytes.Count(b[:r.n-1], []byte("\n"))
}

// byteReader reads b one byte per call and counts the bytes read.
type byteReader struct {
	b []byte
	n int
}

func (r *byteReader) Read(p []byte) (int, error) {
	if r.n >= len(r.b) {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0] = r.b[r.n]
	r.n++
	return 1, nil
}
