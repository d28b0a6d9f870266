package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"text/template"
)

// A chain's templates read the numbers of JSON as json.Number (NumbersAsWritten),
// a string to text/template. The functions here let such a number compare and
// format as a number, as a float64 did under NumbersAsFloats:
//
//   - eq, ne, lt, le, gt and ge compare a json.Number with a number (an int or
//     float literal, an .args int64, another json.Number) by value: two integers
//     exactly, past 2^53 too, otherwise as float64s. A json.Number against a
//     string still compares as text ({{if eq .steps.a.json.n "0"}}), and
//     anything else is text/template's own comparison, its errors included.
//   - printf formats a json.Number with %d (an integer), %f, %e, %g (as its
//     float64) as it does a number, and with %v or %s as it was written.
//
// The functions are pure, as every chain function is: replay renders a step's
// arguments again and must get the same text.

// builtinCmp runs text/template's own comparison functions, for the operands
// that hold no json.Number, so those compare exactly as a template without
// these functions would, errors included.
var builtinCmp = func() map[string]*template.Template {
	m := map[string]*template.Template{}
	for _, name := range []string{"eq", "ne", "lt", "le", "gt", "ge"} {
		m[name] = template.Must(template.New(name).Parse("{{if " + name + " .A .B}}1{{end}}"))
	}
	return m
}()

func builtinCompare(name string, a, b any) (bool, error) {
	var buf bytes.Buffer
	if err := builtinCmp[name].Execute(&buf, struct{ A, B any }{a, b}); err != nil {
		// "template: eq:1:5: executing ... error calling eq: X": the function's
		// own error is X, which the calling template wraps as it wraps any.
		for u := errors.Unwrap(err); u != nil; u = errors.Unwrap(u) {
			err = u
		}
		return false, err
	}
	return buf.Len() > 0, nil
}

// numberCmp compares a and b when either is a json.Number and the other a number,
// and says whether it did.
func numberCmp(a, b any) (cmp int, ok bool, err error) {
	na, aIsNum := a.(json.Number)
	nb, bIsNum := b.(json.Number)
	if !aIsNum && !bIsNum {
		return 0, false, nil
	}
	x, ok := numberOperand(a, na, aIsNum)
	if !ok {
		return 0, false, nil
	}
	y, ok := numberOperand(b, nb, bIsNum)
	if !ok {
		return 0, false, nil
	}
	if x.i != nil && y.i != nil {
		return x.i.Cmp(y.i), true, nil
	}
	if x.badFloat != nil {
		return 0, true, x.badFloat
	}
	if y.badFloat != nil {
		return 0, true, y.badFloat
	}
	switch {
	case x.f < y.f:
		return -1, true, nil
	case x.f > y.f:
		return 1, true, nil
	case x.f == y.f:
		return 0, true, nil
	}
	return 0, true, errors.New("incompatible types for comparison") // NaN
}

type operand struct {
	i        *big.Int // set when the operand is an integer
	f        float64
	badFloat error
}

// numberOperand reads v (n when isNum) as a number: a json.Number, or one of Go's
// int, uint and float kinds a template literal or .args holds.
func numberOperand(v any, n json.Number, isNum bool) (operand, bool) {
	if isNum {
		var o operand
		if i, ok := new(big.Int).SetString(string(n), 10); ok {
			o.i = i
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return o, false // not a number: compare as text
		}
		if err != nil {
			o.badFloat = fmt.Errorf("%s is past a float64's range", n)
		}
		o.f = f
		return o, true
	}
	switch x := v.(type) {
	case int:
		return operand{i: big.NewInt(int64(x)), f: float64(x)}, true
	case int64:
		return operand{i: big.NewInt(x), f: float64(x)}, true
	case int32:
		return operand{i: big.NewInt(int64(x)), f: float64(x)}, true
	case uint64:
		return operand{i: new(big.Int).SetUint64(x), f: float64(x)}, true
	case uint:
		return operand{i: new(big.Int).SetUint64(uint64(x)), f: float64(x)}, true
	case float64:
		return operand{f: x}, true
	case float32:
		return operand{f: float64(x)}, true
	}
	return operand{}, false
}

func chainEq(a any, bs ...any) (bool, error) {
	if len(bs) == 0 {
		return builtinCompare("eq", a, nil) // text/template's "missing argument" error
	}
	a = nullAsNil(a)
	for _, b := range bs {
		b = nullAsNil(b)
		c, ok, err := numberCmp(a, b)
		if !ok {
			eq, err := builtinCompare("eq", a, b)
			if err != nil || eq {
				return eq, err
			}
			continue
		}
		if err != nil {
			return false, err
		}
		if c == 0 {
			return true, nil
		}
	}
	return false, nil
}

func chainOrder(name string, want func(int) bool) func(a, b any) (bool, error) {
	return func(a, b any) (bool, error) {
		a, b = nullAsNil(a), nullAsNil(b)
		c, ok, err := numberCmp(a, b)
		if !ok {
			return builtinCompare(name, a, b)
		}
		if err != nil {
			return false, err
		}
		return want(c), nil
	}
}

// writtenNumber is a json.Number as printf's argument.
type writtenNumber json.Number

func (n writtenNumber) Format(f fmt.State, verb rune) {
	format := fmt.FormatString(f, verb)
	switch verb {
	case 'd', 'x', 'X', 'o', 'O', 'b':
		if i, ok := new(big.Int).SetString(string(n), 10); ok {
			fmt.Fprintf(f, format, i)
			return
		}
	case 'e', 'E', 'f', 'F', 'g', 'G':
		if x, err := strconv.ParseFloat(string(n), 64); err == nil {
			fmt.Fprintf(f, format, x)
			return
		}
	}
	fmt.Fprintf(f, format, json.Number(n))
}

func chainPrintf(format string, args ...any) string {
	copied := false
	for i, a := range args {
		if n, ok := a.(json.Number); ok {
			if !copied {
				args, copied = append([]any(nil), args...), true
			}
			args[i] = writtenNumber(n)
		}
	}
	return fmt.Sprintf(format, args...)
}
