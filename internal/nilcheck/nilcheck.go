// Package nilcheck tells nil interface values, typed nil pointers included,
// apart from usable ones, for the constructors that refuse them.
package nilcheck

import "reflect"

// Is reports whether v is nil or holds a nil pointer, map, slice, channel
// or function: a value whose methods would panic or misbehave.
func Is(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return r.IsNil()
	}
	return false
}
