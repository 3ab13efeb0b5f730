package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// nginxCombined is nginx's predefined "combined" log_format, as its
// documentation (ngx_http_log_module) defines it.
const nginxCombined = `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"`

// record is what a log line says, for the fields a replay asks for.
type record struct {
	t    int64    // Unix nanoseconds
	vals [][]byte // by field index (fields.index); nil when absent
	// scratch holds unescaped JSON strings; reused from line to line.
	scratch []byte
}

// fields numbers the fields a replay reads from each line.
type fields struct{ names []string }

func (f *fields) index(name string) int {
	for i, n := range f.names {
		if n == name {
			return i
		}
	}
	f.names = append(f.names, name)
	return len(f.names) - 1
}

// within returns an error naming the first field asked for (by -key, -cost
// or -descriptor) that a line of what has not: such a field would be
// empty on every line.
func (f *fields) within(have []string, what string) error {
	for _, n := range f.names {
		if !slices.Contains(have, n) {
			return fmt.Errorf("$%s: %s has no such field (it has $%s)", n, what, strings.Join(have, ", $"))
		}
	}
	return nil
}

// lookup returns the index of name, -1 when no template asks for it.
func (f *fields) lookup(name string) int {
	for i, n := range f.names {
		if n == name {
			return i
		}
	}
	return -1
}

// lookupBytes is lookup for a name in a line, without copying it.
func (f *fields) lookupBytes(name []byte) int {
	for i, n := range f.names {
		if string(name) == n {
			return i
		}
	}
	return -1
}

// parser reads one log line (without its newline) into r.
type parser interface {
	parse(line []byte, r *record) error
}

var errNoTime = errors.New("no timestamp")

// tsCache remembers the last timestamp text and its value: consecutive
// lines mostly share their second.
type tsCache struct {
	text []byte
	ns   int64
}

func (c *tsCache) get(b []byte, parse func(string) (int64, error)) (int64, error) {
	if c.text != nil && bytes.Equal(b, c.text) {
		return c.ns, nil
	}
	ns, err := parse(string(b))
	if err != nil {
		return 0, err
	}
	c.text = append(c.text[:0], b...)
	c.ns = ns
	return ns, nil
}

func parseTimeLocal(s string) (int64, error) {
	t, err := time.Parse("02/Jan/2006:15:04:05 -0700", s)
	if err != nil {
		return 0, fmt.Errorf("time_local %q: want 02/Jan/2006:15:04:05 -0700", s)
	}
	return t.UnixNano(), nil
}

func parseISO(s string) (int64, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("time %q: want RFC 3339 (2006-01-02T15:04:05.000Z)", s)
	}
	return t.UnixNano(), nil
}

// parseISOCached parses an RFC 3339 time, reusing the cached seconds when
// only the fraction changed ("...T12:00:00.123Z" after "...T12:00:00.045Z").
func parseISOCached(c *tsCache, b []byte) (int64, error) {
	dot := bytes.IndexByte(b, '.')
	if dot < 0 || dot != 19 {
		return c.get(b, parseISO)
	}
	end := dot + 1
	frac, digits := int64(0), 0
	for end < len(b) && b[end] >= '0' && b[end] <= '9' {
		if digits < 9 {
			frac = frac*10 + int64(b[end]-'0')
			digits++
		}
		end++
	}
	if digits == 0 {
		return c.get(b, parseISO)
	}
	for ; digits < 9; digits++ {
		frac *= 10
	}
	// The cache key: the seconds and the zone, the fraction left out.
	key := make([]byte, 0, 32)
	key = append(append(key, b[:dot]...), b[end:]...)
	sec, err := c.get(key, func(s string) (int64, error) { return parseISO(s) })
	if err != nil {
		return 0, fmt.Errorf("time %q: want RFC 3339 (2006-01-02T15:04:05.000Z)", b)
	}
	return sec + frac, nil
}

// parseEpoch parses Unix seconds with an optional fraction ("1700000000.123").
func parseEpoch(b []byte) (int64, error) {
	var sec, frac int64
	i, digits := 0, 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		sec = sec*10 + int64(b[i]-'0')
		digits++
	}
	if digits == 0 || digits > 11 {
		return 0, fmt.Errorf("time %q: want Unix seconds such as 1700000000.123", b)
	}
	if i < len(b) && b[i] == '.' {
		i++
		n := 0
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if n < 9 {
				frac = frac*10 + int64(b[i]-'0')
				n++
			}
		}
		for ; n < 9; n++ {
			frac *= 10
		}
	}
	if i != len(b) {
		return 0, fmt.Errorf("time %q: want Unix seconds such as 1700000000.123", b)
	}
	return sec*1e9 + frac, nil
}

// nginxParser reads lines written by an nginx log_format: literal text
// and $variables, each variable's value running to the next literal.
type nginxParser struct {
	items []nginxItem
	// last is the index of the last item the replay reads: a line is
	// parsed up to it, the rest (request, referrer, user agent) is not
	// looked at.
	last    int
	timeIdx int // the item holding the time
	timeVar string
	ts      tsCache
}

type nginxItem struct {
	lit   []byte // a literal, or
	name  string // a variable
	field int    // its index in record.vals, -1 when not asked for
}

// timeVars are the nginx variables a replay reads time from, preferred in
// this order.
var timeVars = []string{"msec", "time_iso8601", "time_local"}

func newNginxParser(format string, fs *fields) (*nginxParser, error) {
	p := &nginxParser{timeIdx: -1}
	var lit []byte
	for i := 0; i < len(format); {
		if format[i] != '$' {
			lit = append(lit, format[i])
			i++
			continue
		}
		name, j, err := readVar(format, i, "")
		if err != nil {
			return nil, fmt.Errorf("log format: %w", err)
		}
		if len(lit) > 0 {
			p.items = append(p.items, nginxItem{lit: lit, field: -1})
			lit = nil
		}
		if n := len(p.items); n > 0 && p.items[n-1].lit == nil {
			return nil, fmt.Errorf("log format: $%s follows $%s with nothing between them", name, p.items[n-1].name)
		}
		p.items = append(p.items, nginxItem{name: name, field: fs.lookup(name)})
		i = j
	}
	if len(lit) > 0 {
		p.items = append(p.items, nginxItem{lit: lit, field: -1})
	}
	for _, tv := range timeVars {
		for i, it := range p.items {
			if it.name == tv && p.timeIdx < 0 {
				p.timeIdx, p.timeVar = i, tv
			}
		}
	}
	if p.timeIdx < 0 {
		return nil, errors.New("log format: no $time_local, $time_iso8601 or $msec to read time from")
	}
	for i, it := range p.items {
		if i == p.timeIdx || it.field >= 0 {
			p.last = i
		}
	}
	return p, nil
}

// vars returns the names of the format's variables.
func (p *nginxParser) vars() []string {
	var names []string
	for _, it := range p.items {
		if it.lit == nil {
			names = append(names, it.name)
		}
	}
	return names
}

// readVar reads the variable at s[i] ('$'): "$name" (letters, digits, '_'
// and the bytes of extra) or "${name}"; it returns the name and the index
// after it.
func readVar(s string, i int, extra string) (string, int, error) {
	j := i + 1
	if j < len(s) && s[j] == '{' {
		k := strings.IndexByte(s[j:], '}')
		if k < 0 || k == 1 {
			return "", 0, fmt.Errorf("%q: unclosed or empty ${ at %d", s, i)
		}
		return s[j+1 : j+k], j + k + 1, nil
	}
	for j < len(s) && (isAlnum(s[j]) || s[j] == '_' || strings.IndexByte(extra, s[j]) >= 0) {
		j++
	}
	if j == i+1 {
		return "", 0, fmt.Errorf("%q: a lone $ at %d", s, i)
	}
	return s[i+1 : j], j, nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func (p *nginxParser) parse(line []byte, r *record) error {
	pos := 0
	for i := range p.items[:p.last+1] {
		it := &p.items[i]
		if it.lit != nil {
			if !bytes.HasPrefix(line[pos:], it.lit) {
				return fmt.Errorf("want %q at column %d", it.lit, pos+1)
			}
			pos += len(it.lit)
			continue
		}
		end := len(line)
		if i+1 < len(p.items) {
			k := bytes.Index(line[pos:], p.items[i+1].lit)
			if k < 0 {
				return fmt.Errorf("$%s: no %q after column %d", it.name, p.items[i+1].lit, pos+1)
			}
			end = pos + k
		}
		v := line[pos:end]
		if it.field >= 0 && !(len(v) == 1 && v[0] == '-') { // nginx logs an empty value as "-"
			r.vals[it.field] = v
		}
		if i == p.timeIdx {
			var err error
			switch p.timeVar {
			case "time_local":
				r.t, err = p.ts.get(v, parseTimeLocal)
			case "time_iso8601":
				r.t, err = parseISOCached(&p.ts, v)
			default:
				r.t, err = parseEpoch(v)
			}
			if err != nil {
				return err
			}
		}
		pos = end
	}
	return nil
}

// csvParser reads "time,key[,cost]" lines: time in Unix seconds (with a
// fraction) or RFC 3339. A first line starting with "time" is a header.
type csvParser struct {
	key, cost int
	ts        tsCache
}

func (p *csvParser) parse(line []byte, r *record) error {
	var cols [3][]byte
	n := 0
	for n < 3 {
		i := bytes.IndexByte(line, ',')
		if i < 0 || n == 2 {
			cols[n] = line
			n++
			break
		}
		cols[n], line = line[:i], line[i+1:]
		n++
	}
	if n < 2 {
		return errors.New("want time,key[,cost]")
	}
	t := bytes.TrimSpace(cols[0])
	var err error
	if len(t) > 10 && t[4] == '-' {
		r.t, err = parseISOCached(&p.ts, t)
	} else {
		r.t, err = parseEpoch(t)
	}
	if err != nil {
		return err
	}
	if p.key >= 0 {
		r.vals[p.key] = cols[1]
	}
	if p.cost >= 0 && n == 3 {
		r.vals[p.cost] = bytes.TrimSpace(cols[2])
	}
	return nil
}

// jsonParser reads one flat JSON object per line: Envoy's JSON access
// log (json_format, as Envoy Gateway and Istio configure it by default),
// time from start_time (RFC 3339).
type jsonParser struct {
	fs      *fields
	timeKey string
	ts      tsCache
}

func (p *jsonParser) parse(line []byte, r *record) error {
	r.scratch = r.scratch[:0]
	i := skipSpace(line, 0)
	if i >= len(line) || line[i] != '{' {
		return errors.New("not a JSON object")
	}
	i = skipSpace(line, i+1)
	if i < len(line) && line[i] == '}' {
		i = -1
	}
	// The line is read up to the last field the replay needs.
	gotTime, found := false, 0
	for i >= 0 && (!gotTime || found < len(p.fs.names)) {
		key, j, err := jsonString(line, skipSpace(line, i), nil)
		if err != nil {
			return err
		}
		i = skipSpace(line, j)
		if i >= len(line) || line[i] != ':' {
			return fmt.Errorf("want ':' at column %d", i+1)
		}
		var got int
		if i, got, err = p.value(line, skipSpace(line, i+1), key, r); err != nil {
			return err
		}
		gotTime = gotTime || got == gotTheTime
		if got == gotAField {
			found++
		}
		if i, err = nextField(line, i); err != nil {
			return err
		}
	}
	if !gotTime {
		return fmt.Errorf("no %q", p.timeKey)
	}
	return nil
}

// What jsonParser.value read.
const (
	gotNothing = iota
	gotTheTime
	gotAField
)

// value reads the value of key at line[i] into r when the replay needs it,
// else steps over it.
func (p *jsonParser) value(line []byte, i int, key []byte, r *record) (int, int, error) {
	if string(key) == p.timeKey {
		val, i, err := jsonValue(line, i, &r.scratch)
		if err == nil {
			r.t, err = parseISOCached(&p.ts, val)
		}
		return i, gotTheTime, err
	}
	k := p.fs.lookupBytes(key)
	if k < 0 {
		i, err := skipValue(line, i)
		return i, gotNothing, err
	}
	val, i, err := jsonValue(line, i, &r.scratch)
	r.vals[k] = val
	return i, gotAField, err
}

// nextField steps over the ',' after a field: the index of the next
// field, or -1 at the object's closing '}'.
func nextField(b []byte, i int) (int, error) {
	i = skipSpace(b, i)
	switch {
	case i < len(b) && b[i] == ',':
		return i + 1, nil
	case i < len(b) && b[i] == '}':
		return -1, nil
	}
	return 0, fmt.Errorf("want ',' or '}' at column %d", i+1)
}

// skipValue steps over the value at b[i] without decoding it: a string to
// its closing quote (one not escaped), anything else to the next ',' or
// '}' (a flat object holds no nested one).
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) || b[i] != '"' {
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' {
			j++
		}
		return j, nil
	}
	for j := i + 1; j < len(b); {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			break
		}
		j += k
		esc := 0
		for e := j - 1; e > i && b[e] == '\\'; e-- {
			esc++
		}
		if esc%2 == 0 {
			return j + 1, nil
		}
		j++
	}
	return 0, errors.New("unterminated string")
}

// jsonValue reads the value at b[i]: a string (unescaped), else the text
// of a number, true or false up to the next ',' or '}' (null: nil).
func jsonValue(b []byte, i int, scratch *[]byte) ([]byte, int, error) {
	if i < len(b) && b[i] == '"' {
		return jsonString(b, i, scratch)
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' {
		j++
	}
	val := bytes.TrimSpace(b[i:j])
	if string(val) == "null" {
		val = nil
	}
	return val, j, nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// jsonString reads the string at b[i] (its opening quote) and returns it
// and the index after its closing quote. Without escapes it is a slice of
// b; with escapes it is decoded into *scratch (nil scratch: the key of a
// field, returned raw).
func jsonString(b []byte, i int, scratch *[]byte) ([]byte, int, error) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, fmt.Errorf("want '\"' at column %d", i+1)
	}
	start := i + 1
	j := start + bytes.IndexByte(b[start:], '"')
	if j >= start && bytes.IndexByte(b[start:j], '\\') < 0 {
		return b[start:j], j + 1, nil
	}
	j = start
	// Escapes: find the end, then decode with encoding/json.
	for j < len(b) {
		if b[j] == '\\' {
			j += 2
			continue
		}
		if b[j] == '"' {
			break
		}
		j++
	}
	if j >= len(b) {
		return nil, j, errors.New("unterminated string")
	}
	var s string
	if err := json.Unmarshal(b[i:j+1], &s); err != nil {
		return nil, j, fmt.Errorf("bad string at column %d", i+1)
	}
	if scratch == nil {
		return []byte(s), j + 1, nil
	}
	n := len(*scratch)
	*scratch = append(*scratch, s...)
	return (*scratch)[n:], j + 1, nil
}
