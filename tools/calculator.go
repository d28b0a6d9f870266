package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/troupe-run/troupe/messages"
)

// Limits of the calculator.
const (
	// MaxExpressionLength is the longest expression, in characters.
	MaxExpressionLength = 1000
	// MaxExpressionDepth is the deepest nesting of parentheses, function calls, unary
	// signs and exponents.
	MaxExpressionDepth = 100
)

// Calculator evaluates arithmetic expressions. It parses them with its own small
// grammar and never runs code: the only things an expression can do are listed in
// its Spec. The zero value is ready to use and safe for concurrent use.
//
// Grammar, loosest binding first (^ binds tighter than a unary sign, so -2^2 is -4,
// and is right-associative, so 2^3^2 is 2^9):
//
//	expression = term { ("+" | "-") term }
//	term       = unary { ("*" | "/" | "%") unary }
//	unary      = ("+" | "-") unary | power
//	power      = primary [ ("^" | "**") unary ]
//	primary    = number | constant | function "(" expression { "," expression } ")"
//	           | "(" expression ")"
//
// Numbers are decimal with an optional fraction and exponent (12, 0.5, .5, 1.5e-3).
// % is the remainder with the sign of the dividend (as in Go and C). Names are
// case-insensitive. Angles are in radians.
type Calculator struct{}

var _ Tool = Calculator{}

const calculatorDescription = "Evaluates an arithmetic expression exactly as written and returns the number. " +
	"Operators: + - * / % (remainder) ^ (power), unary minus, parentheses. " +
	"Numbers: 12, 0.5, 1.5e-3. Constants: pi, e. Functions: sqrt, abs, round (round(x) or round(x, digits)), " +
	"floor, ceil, min, max (any number of arguments), pow(x, y), ln, log (log(x) is natural, log(x, base)), " +
	"log10, log2, exp, sin, cos, tan, asin, acos, atan (radians). " +
	"Use it for any arithmetic instead of computing in your head."

// calculatorParameters is the JSON Schema of the arguments; it is part of the prompt,
// so it is a constant and stays byte-identical.
const calculatorParameters = `{"type":"object","properties":{"expression":{"type":"string",` +
	`"description":"The expression to evaluate, e.g. \"12 * (7 + 5)\" or \"sqrt(2) ^ 2\"","maxLength":1000}},` +
	`"required":["expression"],"additionalProperties":false}`

// calculatorArguments reads the calculator's arguments as every tool's are read
// (ArgumentParser): JSON or key=value pairs, coerced to its schema's types (a number
// given for the expression is taken as its text) and checked against it (a
// duplicate key, an unknown field, an expression over 1000 characters refused).
var calculatorArguments = mustArgumentParser("calculator", calculatorParameters)

// Spec implements Tool.
func (Calculator) Spec() messages.ToolSpec {
	return messages.ToolSpec{
		Name:        "calculator",
		Description: calculatorDescription,
		Parameters:  json.RawMessage(calculatorParameters),
	}
}

// Call implements Tool. Arguments are {"expression": "..."}; the result is the value
// as text: "144" for an integer, else the shortest decimal that reads back as the
// same float64 ("0.1", "1e-7"). Every failure wraps ErrInvalidArguments and is an
// *ArgumentError, with the position in the expression where it applies.
func (Calculator) Call(ctx context.Context, c Call) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	expression, ok := plainExpression(c.Arguments)
	if !ok {
		// Anything but the plain {"expression": "..."} a model nearly always sends
		// (numbers, key=value pairs, other or repeated keys, a long expression) takes
		// the parser, with its coercions and its errors.
		args, err := calculatorArguments.Parse(c.Arguments)
		if err != nil {
			return "", err
		}
		expression, _ = args["expression"].(string)
	}
	v, err := Evaluate(expression)
	if err != nil {
		return "", err
	}
	return FormatNumber(v), nil
}

// Evaluate parses and evaluates an expression with the calculator's grammar. The
// result is always finite; every failure is an *ArgumentError wrapping
// ErrInvalidArguments.
func Evaluate(expr string) (float64, error) {
	if n := utf8.RuneCountInString(expr); n > MaxExpressionLength {
		return 0, &ArgumentError{Tool: "calculator", Reason: fmt.Sprintf("expression is too long: %d characters, the limit is %d", n, MaxExpressionLength)}
	}
	p := &parser{src: expr}
	p.next()
	root, err := p.parse()
	if err == nil {
		var v float64
		v, err = root.eval()
		if err == nil {
			return v, nil
		}
	}
	var e *exprError
	if !errors.As(err, &e) {
		e = &exprError{pos: -1, reason: err.Error()}
	}
	ae := &ArgumentError{Tool: "calculator", Reason: e.reason}
	if e.pos >= 0 {
		ae.Pos = utf8.RuneCountInString(expr[:e.pos]) + 1
	}
	return 0, ae
}

// FormatNumber writes a number the way the calculator returns it: the shortest decimal
// that reads back as the same float64, in plain notation when its magnitude is in
// [1e-6, 1e21) ("144", "-3", "0.1", "1234.5", "18446744073709552000" for 2^64) and
// in scientific notation outside ("1e-7", "1.5e+300"), as JavaScript prints numbers.
func FormatNumber(v float64) string {
	if v == 0 {
		return "0" // also for -0
	}
	a := math.Abs(v)
	if a >= 1e-6 && a < 1e21 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if i := strings.IndexByte(s, 'e'); i >= 0 && s[i+2] == '0' { // "1e-07" -> "1e-7"
		s = s[:i+2] + strings.TrimLeft(s[i+2:], "0")
	}
	return s
}

// exprError is a parse or evaluation error at a byte offset of the expression (-1
// when it is about the whole expression).
type exprError struct {
	pos    int
	reason string
}

func (e *exprError) Error() string { return e.reason }

func errAt(pos int, format string, args ...any) error {
	return &exprError{pos: pos, reason: fmt.Sprintf(format, args...)}
}

// Tokens.
type tokenKind int

const (
	tokEOF tokenKind = iota
	tokNumber
	tokName
	tokOp // + - * / % ^ (and ** as ^)
	tokLParen
	tokRParen
	tokComma
)

type token struct {
	kind tokenKind
	pos  int    // byte offset
	text string // as written
	op   byte   // for tokOp
	num  float64
}

// describe names a token for an error message.
func (t token) describe() string {
	switch t.kind {
	case tokEOF:
		return "the end of the expression"
	case tokNumber:
		return "number " + t.text
	case tokName:
		return fmt.Sprintf("name %q", t.text)
	}
	return fmt.Sprintf("%q", t.text)
}

// Syntax tree. Parsing is separate from evaluation so that a syntax error anywhere is
// reported before a math error (a division by zero) that comes earlier.
type node interface {
	eval() (float64, error)
}

type numberNode float64

type unaryNode struct {
	neg bool
	x   node
}

type binaryNode struct {
	op   byte
	pos  int
	l, r node
}

type callNode struct {
	fn   *function
	name string
	pos  int
	args []node
}

type parser struct {
	src   string
	off   int   // next byte to lex
	tok   token // current token
	err   error // first lexing error
	depth int
}

func (p *parser) next() {
	if p.err != nil {
		return
	}
	for p.off < len(p.src) && strings.IndexByte(" \t\r\n", p.src[p.off]) >= 0 {
		p.off++
	}
	start := p.off
	if start >= len(p.src) {
		p.tok = token{kind: tokEOF, pos: start}
		return
	}
	c := p.src[start]
	switch {
	case isDigit(c) || (c == '.' && start+1 < len(p.src) && isDigit(p.src[start+1])):
		p.lexNumber()
		return
	case isLetter(c):
		end := start + 1
		for end < len(p.src) && (isLetter(p.src[end]) || isDigit(p.src[end])) {
			end++
		}
		p.tok = token{kind: tokName, pos: start, text: p.src[start:end]}
		p.off = end
		return
	case c == '*' && strings.HasPrefix(p.src[start:], "**"):
		p.tok = token{kind: tokOp, pos: start, text: "**", op: '^'}
		p.off += 2
		return
	case strings.IndexByte("+-*/%^", c) >= 0:
		p.tok = token{kind: tokOp, pos: start, text: string(c), op: c}
	case c == '(':
		p.tok = token{kind: tokLParen, pos: start, text: "("}
	case c == ')':
		p.tok = token{kind: tokRParen, pos: start, text: ")"}
	case c == ',':
		p.tok = token{kind: tokComma, pos: start, text: ","}
	default:
		r, _ := utf8.DecodeRuneInString(p.src[start:])
		p.err = errAt(start, "unexpected character %q", r)
		p.tok = token{kind: tokEOF, pos: start}
		return
	}
	p.off++
}

func (p *parser) lexNumber() {
	start, i := p.off, p.off
	for i < len(p.src) && isDigit(p.src[i]) {
		i++
	}
	if i < len(p.src) && p.src[i] == '.' {
		i++
		for i < len(p.src) && isDigit(p.src[i]) {
			i++
		}
	}
	// An exponent only when digits follow: "2e" is 2 followed by the constant e.
	if i < len(p.src) && (p.src[i] == 'e' || p.src[i] == 'E') {
		j := i + 1
		if j < len(p.src) && (p.src[j] == '+' || p.src[j] == '-') {
			j++
		}
		if j < len(p.src) && isDigit(p.src[j]) {
			for j < len(p.src) && isDigit(p.src[j]) {
				j++
			}
			i = j
		}
	}
	text := p.src[start:i]
	v, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsInf(v, 0) {
		p.err = errAt(start, "number %s is too large", text)
		p.tok = token{kind: tokEOF, pos: start}
		return
	}
	p.tok = token{kind: tokNumber, pos: start, text: text, num: v}
	p.off = i
}

func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isLetter(c byte) bool { return c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') }

func (p *parser) parse() (node, error) {
	if p.err == nil && p.tok.kind == tokEOF {
		return nil, &exprError{pos: -1, reason: "expression is empty"}
	}
	n, err := p.expression()
	if err != nil {
		return nil, err
	}
	if p.err != nil {
		return nil, p.err
	}
	switch p.tok.kind {
	case tokEOF:
		return n, nil
	case tokRParen:
		return nil, errAt(p.tok.pos, "unbalanced parentheses: ')' has no matching '('")
	}
	return nil, errAt(p.tok.pos, "unexpected %s after a complete expression (is an operator missing?)", p.tok.describe())
}

// enter counts one level of nesting; leave undoes it.
func (p *parser) enter(pos int) error {
	p.depth++
	if p.depth > MaxExpressionDepth {
		return errAt(pos, "expression is nested too deeply (more than %d levels)", MaxExpressionDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

func (p *parser) expression() (node, error) {
	l, err := p.term()
	for err == nil && p.tok.kind == tokOp && (p.tok.op == '+' || p.tok.op == '-') {
		op := p.tok
		p.next()
		var r node
		if r, err = p.term(); err == nil {
			l = &binaryNode{op: op.op, pos: op.pos, l: l, r: r}
		}
	}
	return l, err
}

func (p *parser) term() (node, error) {
	l, err := p.unary()
	for err == nil && p.tok.kind == tokOp && (p.tok.op == '*' || p.tok.op == '/' || p.tok.op == '%') {
		op := p.tok
		p.next()
		var r node
		if r, err = p.unary(); err == nil {
			l = &binaryNode{op: op.op, pos: op.pos, l: l, r: r}
		}
	}
	return l, err
}

func (p *parser) unary() (node, error) {
	if p.tok.kind != tokOp || (p.tok.op != '+' && p.tok.op != '-') {
		return p.power()
	}
	sign := p.tok
	if err := p.enter(sign.pos); err != nil {
		return nil, err
	}
	defer p.leave()
	p.next()
	x, err := p.unary()
	if err != nil {
		return nil, err
	}
	if sign.op == '+' {
		return x, nil
	}
	return &unaryNode{neg: true, x: x}, nil
}

func (p *parser) power() (node, error) {
	base, err := p.primary()
	if err != nil || p.tok.kind != tokOp || p.tok.op != '^' {
		return base, err
	}
	op := p.tok
	if err := p.enter(op.pos); err != nil {
		return nil, err
	}
	defer p.leave()
	p.next()
	exp, err := p.unary()
	if err != nil {
		return nil, err
	}
	return &binaryNode{op: '^', pos: op.pos, l: base, r: exp}, nil
}

func (p *parser) primary() (node, error) {
	if p.err != nil {
		return nil, p.err
	}
	t := p.tok
	switch t.kind {
	case tokNumber:
		p.next()
		return numberNode(t.num), nil
	case tokLParen:
		if err := p.enter(t.pos); err != nil {
			return nil, err
		}
		defer p.leave()
		p.next()
		x, err := p.expression()
		if err != nil {
			return nil, err
		}
		if err := p.closeParen(t); err != nil {
			return nil, err
		}
		return x, nil
	case tokName:
		return p.name()
	case tokEOF:
		return nil, errAt(t.pos, "expression ends early: a number, name or '(' is missing")
	case tokRParen:
		return nil, errAt(t.pos, "unexpected ')': a number, name or '(' is missing")
	}
	return nil, errAt(t.pos, "unexpected %s: a number, name or '(' is missing", t.describe())
}

// closeParen expects the ')' that closes the '(' token open.
func (p *parser) closeParen(open token) error {
	if p.err != nil {
		return p.err
	}
	if p.tok.kind == tokRParen {
		p.next()
		return nil
	}
	if p.tok.kind == tokEOF {
		return errAt(open.pos, "unbalanced parentheses: this '(' is never closed")
	}
	return errAt(p.tok.pos, "unexpected %s: expected ')' to close the '(' at position %d",
		p.tok.describe(), utf8.RuneCountInString(p.src[:open.pos])+1)
}

func (p *parser) name() (node, error) {
	t := p.tok
	lower := strings.ToLower(t.text)
	p.next()
	if p.err != nil {
		return nil, p.err
	}
	if v, ok := constants[lower]; ok {
		if p.tok.kind == tokLParen {
			return nil, errAt(t.pos, "%s is a constant, not a function", t.text)
		}
		return numberNode(v), nil
	}
	fn, ok := functions[lower]
	if !ok {
		return nil, errAt(t.pos, "unknown name %q (known: %s)", t.text, knownNames)
	}
	if p.tok.kind != tokLParen {
		return nil, errAt(t.pos, "%s is a function: call it like %s(x)", t.text, lower)
	}
	open := p.tok
	if err := p.enter(open.pos); err != nil {
		return nil, err
	}
	defer p.leave()
	p.next()
	call := &callNode{fn: fn, name: lower, pos: t.pos}
	if p.tok.kind != tokRParen {
		for {
			arg, err := p.expression()
			if err != nil {
				return nil, err
			}
			call.args = append(call.args, arg)
			if p.tok.kind != tokComma {
				break
			}
			p.next()
		}
	}
	if err := p.closeParen(open); err != nil {
		return nil, err
	}
	if n := len(call.args); n < fn.min || (fn.max >= 0 && n > fn.max) {
		return nil, errAt(t.pos, "%s takes %s, got %d", lower, fn.arity(), n)
	}
	return call, nil
}

// Evaluation. Every operation checks its result: NaN and infinities never escape.

func (n numberNode) eval() (float64, error) { return float64(n), nil }

func (n *unaryNode) eval() (float64, error) {
	x, err := n.x.eval()
	return -x, err
}

func (n *binaryNode) eval() (float64, error) {
	l, err := n.l.eval()
	if err != nil {
		return 0, err
	}
	r, err := n.r.eval()
	if err != nil {
		return 0, err
	}
	var v float64
	switch n.op {
	case '+':
		v = l + r
	case '-':
		v = l - r
	case '*':
		v = l * r
	case '/':
		if r == 0 {
			return 0, errAt(n.pos, "division by zero")
		}
		v = l / r
	case '%':
		if r == 0 {
			return 0, errAt(n.pos, "division by zero (remainder of a division by 0)")
		}
		v = math.Mod(l, r)
	case '^':
		if l == 0 && r < 0 {
			return 0, errAt(n.pos, "division by zero (0 raised to a negative power)")
		}
		if l < 0 && r != math.Trunc(r) {
			return 0, errAt(n.pos, "a negative number raised to a fractional power is not a real number")
		}
		v = math.Pow(l, r)
	}
	return finite(v, n.pos, string(n.op))
}

func finite(v float64, pos int, what string) (float64, error) {
	switch {
	case math.IsInf(v, 0):
		return 0, errAt(pos, "result is not finite: %s overflows", what)
	case math.IsNaN(v):
		return 0, errAt(pos, "result is not a number: %s is undefined here", what)
	}
	return v, nil
}

func (n *callNode) eval() (float64, error) {
	args := make([]float64, len(n.args))
	for i, a := range n.args {
		v, err := a.eval()
		if err != nil {
			return 0, err
		}
		args[i] = v
	}
	v, reason := n.fn.f(args)
	if reason != "" {
		return 0, errAt(n.pos, "%s: %s", n.name, reason)
	}
	return finite(v, n.pos, n.name)
}

// function is a built-in function; f returns a reason when its arguments are out of
// its domain.
type function struct {
	min, max int // max < 0: any number
	f        func(args []float64) (float64, string)
}

func (f *function) arity() string {
	switch {
	case f.max < 0:
		return fmt.Sprintf("at least %d argument(s)", f.min)
	case f.min == f.max && f.min == 1:
		return "1 argument"
	case f.min == f.max:
		return fmt.Sprintf("%d arguments", f.min)
	}
	return fmt.Sprintf("%d to %d arguments", f.min, f.max)
}

func unary(f func(float64) float64) *function {
	return &function{min: 1, max: 1, f: func(a []float64) (float64, string) { return f(a[0]), "" }}
}

func logOf(x float64) (float64, string) {
	if x <= 0 {
		return 0, "the logarithm of a number <= 0 is undefined"
	}
	return math.Log(x), ""
}

// constants and functions are read-only tables.
var (
	constants = map[string]float64{"pi": math.Pi, "e": math.E}
	functions = map[string]*function{
		"sqrt": {min: 1, max: 1, f: func(a []float64) (float64, string) {
			if a[0] < 0 {
				return 0, "the square root of a negative number is not a real number"
			}
			return math.Sqrt(a[0]), ""
		}},
		"abs":   unary(math.Abs),
		"floor": unary(math.Floor),
		"ceil":  unary(math.Ceil),
		"exp":   unary(math.Exp),
		"sin":   unary(math.Sin),
		"cos":   unary(math.Cos),
		"tan":   unary(math.Tan),
		"atan":  unary(math.Atan),
		"asin": {min: 1, max: 1, f: func(a []float64) (float64, string) {
			if a[0] < -1 || a[0] > 1 {
				return 0, "argument must be between -1 and 1"
			}
			return math.Asin(a[0]), ""
		}},
		"acos": {min: 1, max: 1, f: func(a []float64) (float64, string) {
			if a[0] < -1 || a[0] > 1 {
				return 0, "argument must be between -1 and 1"
			}
			return math.Acos(a[0]), ""
		}},
		"round": {min: 1, max: 2, f: func(a []float64) (float64, string) {
			if len(a) == 1 {
				return math.Round(a[0]), ""
			}
			d := a[1]
			if d != math.Trunc(d) || d < -15 || d > 15 {
				return 0, "the number of digits must be an integer between -15 and 15"
			}
			if d < 0 { // round(1234, -2) = 1200: divide by an exact power of ten
				p := math.Pow(10, -d)
				return math.Round(a[0]/p) * p, ""
			}
			scale := math.Pow(10, d)
			if math.IsInf(a[0]*scale, 0) { // too large to have fractional digits anyway
				return a[0], ""
			}
			return math.Round(a[0]*scale) / scale, ""
		}},
		"min": {min: 1, max: -1, f: func(a []float64) (float64, string) { return slices.Min(a), "" }},
		"max": {min: 1, max: -1, f: func(a []float64) (float64, string) { return slices.Max(a), "" }},
		"pow": {min: 2, max: 2, f: func(a []float64) (float64, string) {
			if a[0] == 0 && a[1] < 0 {
				return 0, "division by zero (0 raised to a negative power)"
			}
			if a[0] < 0 && a[1] != math.Trunc(a[1]) {
				return 0, "a negative number raised to a fractional power is not a real number"
			}
			return math.Pow(a[0], a[1]), ""
		}},
		"ln": {min: 1, max: 1, f: func(a []float64) (float64, string) { return logOf(a[0]) }},
		"log": {min: 1, max: 2, f: func(a []float64) (float64, string) {
			x, reason := logOf(a[0])
			if reason != "" || len(a) == 1 {
				return x, reason
			}
			switch b := a[1]; {
			case b <= 0 || b == 1:
				return 0, "the base must be positive and not 1"
			case b == 10: // exact for powers of ten, unlike ln(x)/ln(10)
				return math.Log10(a[0]), ""
			case b == 2:
				return math.Log2(a[0]), ""
			}
			return x / math.Log(a[1]), ""
		}},
		"log10": {min: 1, max: 1, f: func(a []float64) (float64, string) {
			if _, reason := logOf(a[0]); reason != "" {
				return 0, reason
			}
			return math.Log10(a[0]), ""
		}},
		"log2": {min: 1, max: 1, f: func(a []float64) (float64, string) {
			if _, reason := logOf(a[0]); reason != "" {
				return 0, reason
			}
			return math.Log2(a[0]), ""
		}},
	}
	knownNames = "pi, e, abs, acos, asin, atan, ceil, cos, exp, floor, ln, log, log10, log2, max, min, pow, round, sin, sqrt, tan"
)

// SideEffects implements Effectful: evaluating changes nothing.
func (Calculator) SideEffects() bool { return false }

// plainExpression reads the calculator's arguments when they are the plain
// {"expression": "..."} of at most 1000 characters (its schema's bound) that a model
// nearly always sends: what the parser would give them, without its cost.
func plainExpression(raw string) (string, bool) {
	e, ok := soleStringArgument(raw, "expression")
	return e, ok && utf8.RuneCountInString(e) <= 1000
}

// soleStringArgument reads arguments that are exactly a JSON object with one member,
// name, whose value is a string, and returns that string; ok is false for anything
// else. It is the parser's result for such arguments, without its cost.
func soleStringArgument(raw, name string) (value string, ok bool) {
	rest, ok := strings.CutPrefix(strings.TrimLeft(raw, " \t\r\n"), "{")
	if !ok {
		return "", false
	}
	rest, ok = strings.CutPrefix(strings.TrimLeft(rest, " \t\r\n"), `"`+name+`"`)
	if !ok {
		return "", false
	}
	rest, ok = strings.CutPrefix(strings.TrimLeft(rest, " \t\r\n"), ":")
	if !ok {
		return "", false
	}
	rest = strings.TrimLeft(rest, " \t\r\n")
	if !strings.HasPrefix(rest, `"`) {
		return "", false
	}
	// The string's closing quote: the first one no backslash escapes.
	end, escaped := -1, false
	for i := 1; i < len(rest) && end < 0; i++ {
		switch c := rest[i]; {
		case c < 0x20:
			return "", false // a raw control character: the parser says why it is refused
		case c == '\\':
			escaped = true
			i++ // the escaped character
		case c == '"':
			end = i
		}
	}
	if end < 0 || strings.Trim(rest[end+1:], " \t\r\n") != "}" {
		return "", false
	}
	if !escaped {
		if !utf8.ValidString(rest[1:end]) {
			return "", false
		}
		return rest[1:end], true
	}
	if err := json.Unmarshal([]byte(rest[:end+1]), &value); err != nil {
		return "", false
	}
	return value, true
}
