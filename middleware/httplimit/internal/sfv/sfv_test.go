package sfv

import (
	"errors"
	"testing"
)

func TestParseListValid(t *testing.T) {
	ms, err := ParseList(`"burst";q=100;w=60, "daily";q=1000;w=86400`)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Item.Str != "burst" || ms[0].Item.Kind != String {
		t.Fatalf("got %+v", ms)
	}
	if v, ok := ms[1].Params.Get("q"); !ok || v.Kind != Integer || v.Int != 1000 {
		t.Fatalf("q = %+v %v", v, ok)
	}
	ms, err = ParseList(`tok;a;b=?0, (1 2.5 "x");p=:aGk=:, @1700000000, %"caf%c3%a9", -12`)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 5 || ms[0].Item.Kind != Token || !ms[0].Params[0].Value.Bool || ms[0].Params[1].Value.Bool {
		t.Fatalf("got %+v", ms[0])
	}
	if !ms[1].IsList || len(ms[1].Inner) != 3 || ms[1].Inner[1].Value.Dec != 2.5 || string(ms[1].Params[0].Value.Bytes) != "hi" {
		t.Fatalf("inner = %+v", ms[1])
	}
	if ms[2].Item.Kind != Date || ms[3].Item.Str != "café" || ms[4].Item.Int != -12 {
		t.Fatalf("got %+v", ms[2:])
	}
	if ms, err := ParseList(""); err != nil || len(ms) != 0 {
		t.Fatalf("empty list: %v %v", ms, err)
	}
	it, err := ParseItem(` "a\"b";k=1 `)
	if err != nil || it.Value.Str != `a"b` {
		t.Fatalf("item %+v %v", it, err)
	}
}

func TestParseStrict(t *testing.T) {
	bad := []string{
		`"a",`, `"a",,"b"`, `"a";Q=1`, `"a";q=1234567890123456`, `"a";q=1.2345`,
		`"a";q=1.`, `"unterminated`, `"a\x"`, "\"a\x01\"", `"a" "b"`, `a;q=`, `:@@:`,
		`?2`, `1234567890123.5`, `%"A%C3"`, `(1 2`, `"é"`, `"a";q=--1`, "\t\"a\"",
	}
	for _, s := range bad {
		if _, err := ParseList(s); !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseList(%q) = %v, want a syntax error", s, err)
		}
	}
}

func FuzzParseList(f *testing.F) {
	f.Add(`"burst";q=100;w=60`)
	f.Add(`(a b);x=?1, :aGk=:`)
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = ParseList(s) // must not panic
	})
}
