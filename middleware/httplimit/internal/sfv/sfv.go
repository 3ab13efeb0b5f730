// Package sfv is a strict parser for HTTP Structured Field Values (RFC 9651),
// limited to what httplimit reads and tests: Lists (with Inner Lists), Items
// and Parameters of every bare item type.
//
// Parsing follows RFC 9651 section 4.2 to the letter: any deviation (a
// trailing comma, an upper-case key, an integer of 16 digits, a non-ASCII
// byte) fails the whole field, as the RFC requires. It is safe for
// concurrent use: it has no state.
package sfv

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Kind is the type of a bare item.
type Kind uint8

// The bare item types of RFC 9651.
const (
	Integer Kind = iota + 1
	Decimal
	String
	Token
	ByteSeq
	Boolean
	Date
	DisplayString
)

// Value is a bare item. Only the field that matches Kind is meaningful.
type Value struct {
	Kind  Kind
	Int   int64   // Integer and Date
	Dec   float64 // Decimal
	Str   string  // String, Token, DisplayString
	Bytes []byte  // ByteSeq
	Bool  bool    // Boolean
}

// Param is one parameter: a key and its value (Boolean true when the value
// was omitted).
type Param struct {
	Key   string
	Value Value
}

// Params are the ordered parameters of an item or inner list. Keys are
// unique: a repeated key keeps its first position and its last value, as RFC
// 9651 specifies.
type Params []Param

// Get returns the value of key and whether it is present.
func (ps Params) Get(key string) (Value, bool) {
	for _, p := range ps {
		if p.Key == key {
			return p.Value, true
		}
	}
	return Value{}, false
}

// Member is one member of a List: an Item (Inner nil) or an Inner List.
type Member struct {
	Item   Value
	Inner  []Item // non-nil for an inner list (possibly empty)
	IsList bool   // true for an inner list
	Params Params
}

// Item is a bare item with parameters.
type Item struct {
	Value  Value
	Params Params
}

// ErrSyntax is wrapped by every parse error.
var ErrSyntax = errors.New("sfv: syntax error")

type parser struct {
	s string
	i int
}

func (p *parser) fail(what string) error {
	return fmt.Errorf("%w at byte %d: %s", ErrSyntax, p.i, what)
}

func (p *parser) eof() bool { return p.i >= len(p.s) }

func (p *parser) peek() byte {
	if p.eof() {
		return 0
	}
	return p.s[p.i]
}

func (p *parser) skipSP() {
	for !p.eof() && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *parser) skipOWS() {
	for !p.eof() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// ParseList parses a List field value. Several field lines must be joined
// with ", " by the caller (RFC 9110 section 5.3) before parsing.
func ParseList(field string) ([]Member, error) {
	p := &parser{s: field}
	p.skipSP()
	var out []Member
	for !p.eof() {
		m, err := p.member()
		if err != nil {
			return nil, err
		}
		out = append(out, m)
		p.skipOWS()
		if p.eof() {
			return out, nil
		}
		if p.s[p.i] != ',' {
			return nil, p.fail("expected ',' between list members")
		}
		p.i++
		p.skipOWS()
		if p.eof() {
			return nil, p.fail("trailing comma")
		}
	}
	return out, nil
}

// ParseItem parses an Item field value.
func ParseItem(field string) (Item, error) {
	p := &parser{s: field}
	p.skipSP()
	v, err := p.bareItem()
	if err != nil {
		return Item{}, err
	}
	ps, err := p.params()
	if err != nil {
		return Item{}, err
	}
	p.skipSP()
	if !p.eof() {
		return Item{}, p.fail("trailing characters")
	}
	return Item{Value: v, Params: ps}, nil
}

func (p *parser) member() (Member, error) {
	if p.peek() == '(' {
		inner, err := p.innerList()
		if err != nil {
			return Member{}, err
		}
		ps, err := p.params()
		if err != nil {
			return Member{}, err
		}
		return Member{Inner: inner, IsList: true, Params: ps}, nil
	}
	v, err := p.bareItem()
	if err != nil {
		return Member{}, err
	}
	ps, err := p.params()
	if err != nil {
		return Member{}, err
	}
	return Member{Item: v, Params: ps}, nil
}

func (p *parser) innerList() ([]Item, error) {
	p.i++ // '('
	out := []Item{}
	for !p.eof() {
		p.skipSP()
		if p.peek() == ')' {
			p.i++
			return out, nil
		}
		v, err := p.bareItem()
		if err != nil {
			return nil, err
		}
		ps, err := p.params()
		if err != nil {
			return nil, err
		}
		out = append(out, Item{Value: v, Params: ps})
		if c := p.peek(); c != ' ' && c != ')' {
			return nil, p.fail("expected SP or ')' in inner list")
		}
	}
	return nil, p.fail("unterminated inner list")
}

func (p *parser) params() (Params, error) {
	var ps Params
	for p.peek() == ';' {
		p.i++
		p.skipSP()
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		v := Value{Kind: Boolean, Bool: true}
		if p.peek() == '=' {
			p.i++
			if v, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		replaced := false
		for j := range ps {
			if ps[j].Key == k {
				ps[j].Value = v
				replaced = true
			}
		}
		if !replaced {
			ps = append(ps, Param{Key: k, Value: v})
		}
	}
	return ps, nil
}

func (p *parser) key() (string, error) {
	c := p.peek()
	if !(c >= 'a' && c <= 'z') && c != '*' {
		return "", p.fail("key must start with lcalpha or '*'")
	}
	start := p.i
	for !p.eof() {
		c := p.s[p.i]
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.' || c == '*' {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i], nil
}

func (p *parser) bareItem() (Value, error) {
	c := p.peek()
	switch {
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == '"':
		s, err := p.str()
		return Value{Kind: String, Str: s}, err
	case c == '*' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'):
		return Value{Kind: Token, Str: p.token()}, nil
	case c == ':':
		b, err := p.byteSeq()
		return Value{Kind: ByteSeq, Bytes: b}, err
	case c == '?':
		return p.boolean()
	case c == '@':
		p.i++
		v, err := p.number()
		if err != nil {
			return Value{}, err
		}
		if v.Kind != Integer {
			return Value{}, p.fail("date must be an integer")
		}
		return Value{Kind: Date, Int: v.Int}, nil
	case c == '%':
		return p.displayString()
	}
	return Value{}, p.fail("unrecognised bare item")
}

func (p *parser) number() (Value, error) {
	start := p.i
	if p.peek() == '-' {
		p.i++
	}
	if c := p.peek(); c < '0' || c > '9' {
		return Value{}, p.fail("expected digit")
	}
	digits, dot := 0, -1
	for !p.eof() {
		c := p.s[p.i]
		if c >= '0' && c <= '9' {
			digits++
			p.i++
		} else if c == '.' && dot < 0 {
			if digits > 12 {
				return Value{}, p.fail("decimal integer part longer than 12 digits")
			}
			dot = digits
			p.i++
		} else {
			break
		}
		if dot < 0 && digits > 15 {
			return Value{}, p.fail("integer longer than 15 digits")
		}
		if dot >= 0 && digits > 15 {
			return Value{}, p.fail("decimal longer than 15 digits")
		}
	}
	text := p.s[start:p.i]
	if dot < 0 {
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return Value{}, p.fail("bad integer")
		}
		return Value{Kind: Integer, Int: n}, nil
	}
	if text[len(text)-1] == '.' {
		return Value{}, p.fail("decimal ends with '.'")
	}
	if frac := digits - dot; frac > 3 {
		return Value{}, p.fail("decimal with more than 3 fractional digits")
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return Value{}, p.fail("bad decimal")
	}
	return Value{Kind: Decimal, Dec: f}, nil
}

func (p *parser) str() (string, error) {
	p.i++ // '"'
	var b strings.Builder
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.eof() {
				return "", p.fail("dangling escape")
			}
			n := p.s[p.i]
			if n != '"' && n != '\\' {
				return "", p.fail("bad escape")
			}
			b.WriteByte(n)
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", p.fail("non-printable byte in string")
		default:
			b.WriteByte(c)
		}
	}
	return "", p.fail("unterminated string")
}

func (p *parser) token() string {
	start := p.i
	p.i++
	for !p.eof() {
		c := p.s[p.i]
		if isTchar(c) || c == ':' || c == '/' {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i]
}

func isTchar(c byte) bool {
	if (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func (p *parser) byteSeq() ([]byte, error) {
	p.i++ // ':'
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return nil, p.fail("unterminated byte sequence")
	}
	enc := p.s[p.i : p.i+end]
	for j := 0; j < len(enc); j++ {
		c := enc[j]
		if !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' || c == '/' || c == '=') {
			return nil, p.fail("bad base64 character")
		}
	}
	p.i += end + 1
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, p.fail("bad base64")
	}
	return b, nil
}

func (p *parser) boolean() (Value, error) {
	p.i++ // '?'
	switch p.peek() {
	case '1':
		p.i++
		return Value{Kind: Boolean, Bool: true}, nil
	case '0':
		p.i++
		return Value{Kind: Boolean, Bool: false}, nil
	}
	return Value{}, p.fail("bad boolean")
}

func (p *parser) displayString() (Value, error) {
	p.i++ // '%'
	if p.peek() != '"' {
		return Value{}, p.fail("display string needs '\"'")
	}
	p.i++
	var b []byte
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		switch {
		case c < 0x20 || c > 0x7e:
			return Value{}, p.fail("non-printable byte in display string")
		case c == '%':
			if p.i+2 > len(p.s) {
				return Value{}, p.fail("short percent escape")
			}
			h := p.s[p.i : p.i+2]
			if strings.ToLower(h) != h {
				return Value{}, p.fail("upper-case percent escape")
			}
			n, err := strconv.ParseUint(h, 16, 8)
			if err != nil {
				return Value{}, p.fail("bad percent escape")
			}
			b = append(b, byte(n))
			p.i += 2
		case c == '"':
			s := string(b)
			if !utf8.ValidString(s) {
				return Value{}, p.fail("display string is not UTF-8")
			}
			return Value{Kind: DisplayString, Str: s}, nil
		default:
			b = append(b, c)
		}
	}
	return Value{}, p.fail("unterminated display string")
}
