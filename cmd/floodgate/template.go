package main

import (
	"fmt"
	"strings"

	"github.com/floodgate-go/floodgate/middleware"
)

// tmpl is a value built from a log line: literal text and $fields
// ("$remote_addr", "tenant-${http_x_tenant}").
type tmpl struct{ parts []tpart }

type tpart struct {
	lit       string
	field     int // -1 for a literal
	stripPort bool
}

func compileTmpl(s string, fs *fields) (tmpl, error) {
	var t tmpl
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t.parts = append(t.parts, tpart{lit: lit.String(), field: -1})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); {
		if s[i] != '$' {
			lit.WriteByte(s[i])
			i++
			continue
		}
		name, j, err := readVar(s, i, "-:")
		if err != nil {
			return t, err
		}
		flush()
		t.parts = append(t.parts, tpart{field: fs.index(name), stripPort: strings.HasSuffix(name, "address")})
		i = j
	}
	flush()
	return t, nil
}

// render appends the value to dst; ok is false when a field it reads is
// absent or empty from the line.
func (t tmpl) render(dst []byte, r *record) ([]byte, bool) {
	for _, p := range t.parts {
		if p.field < 0 {
			dst = append(dst, p.lit...)
			continue
		}
		v := r.vals[p.field]
		if len(v) == 0 {
			return dst, false
		}
		if p.stripPort {
			v = stripPort(v)
		}
		dst = append(dst, v...)
	}
	return dst, true
}

// stripPort drops the ":port" of an address ("10.0.0.1:5432",
// "[2001:db8::1]:443"); an address without one is returned as it is.
func stripPort(v []byte) []byte {
	if len(v) > 0 && v[0] == '[' {
		for i := range v {
			if v[i] == ']' {
				return v[1:i]
			}
		}
		return v
	}
	colon := -1
	for i, c := range v {
		if c == ':' {
			if colon >= 0 {
				return v // a bare IPv6 address
			}
			colon = i
		}
	}
	if colon < 0 {
		return v
	}
	return v[:colon]
}

// descTmpl is a request descriptor built from a log line
// ("remote_address=$remote_addr,route=/img").
type descTmpl struct {
	keys []string
	vals []tmpl
}

func compileDescriptor(s string, fs *fields) (descTmpl, error) {
	var d descTmpl
	for e := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return d, fmt.Errorf("descriptor %q: want key=value[,key=value...]", s)
		}
		t, err := compileTmpl(v, fs)
		if err != nil {
			return d, fmt.Errorf("descriptor %q: %w", s, err)
		}
		d.keys, d.vals = append(d.keys, k), append(d.vals, t)
	}
	return d, nil
}

// render builds the descriptor into dst (its entries reused); ok is false
// when a field it reads is absent.
func (d descTmpl) render(dst middleware.Descriptor, buf []byte, r *record) (middleware.Descriptor, []byte, bool) {
	dst = dst[:0]
	for i, k := range d.keys {
		start := len(buf)
		var ok bool
		buf, ok = d.vals[i].render(buf, r)
		if !ok {
			return dst, buf, false
		}
		dst = append(dst, middleware.Entry{Key: k, Value: string(buf[start:])})
	}
	return dst, buf, true
}
