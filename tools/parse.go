package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
)

// MaxArgumentDepth is the deepest nesting of objects and arrays an ArgumentParser
// reads: arguments nested deeper are refused before they are decoded further.
const MaxArgumentDepth = 64

// maxProblems bounds the problems one error lists.
const maxProblems = 8

// ArgumentParser reads a model's arguments for one tool: it parses them, coerces
// them to the types of the tool's JSON Schema and validates them against it. It is
// immutable and safe for concurrent use.
//
// Arguments are a JSON object, or key=value pairs (the form the text protocol of
// package llm/react lets models write: `url="https://example.com", method=GET`):
//
//   - pairs are separated by commas or line breaks; a key is a letter or '_'
//     followed by letters, digits, '_' and '-'; ':' may stand for '='.
//   - a value is double-quoted with JSON's escapes ("a \"b\"\n"), single-quoted
//     ('it\'s', with \' and \\), or bare: the text up to the next comma or line
//     break outside brackets and quotes, trimmed ([1, 2] and {"a": 1} stay whole).
//   - every value is a string until coercion gives it the schema's type.
//
// Coercion, where the schema wants one type and the value has another (it never
// applies when the value's type is one the schema allows):
//
//   - integer: a string holding a JSON number with no fraction ("3", "-2", "1e3").
//   - number: a string holding a JSON number ("2.5").
//   - boolean: the strings "true" and "false", in any case.
//   - string: a number becomes its JSON text (12345 → "12345"; the digits are kept
//     as written), a boolean "true" or "false". Models often leave the quotes off
//     an identifier or a postal code; nothing is lost.
//   - array or object: a string holding a JSON array or object (what a key=value
//     pair carries: tags=["a", "b"]).
//
// Nothing else is coerced: "yes" is no boolean, 2.5 no integer, null no string;
// but null given for an optional field whose schema does not allow null (its
// type, its enum, its anyOf or oneOf branches, its $ref's: allowsNull) is taken
// as the field's absence, and null for a required one is refused naming the
// field and the types it wants, as a value of another type is.
//
// Validation then checks type, enum, const, required and unknown properties, the
// bounds of numbers, strings and arrays, and, through github.com/google/jsonschema-go,
// every other keyword of the schema (of the properties it finds at fault, the first in
// key order, the same every time: a chain's refusal is its session's decision, and
// replayed). An error is an *ArgumentError wrapping
// ErrInvalidArguments that names each field at fault (as a path: "items[2].name")
// and what was expected, up to eight problems at once.
//
// Limits are checked before the work they bound: arguments longer than the
// parser's byte limit are refused unread, and JSON nested deeper than
// MaxArgumentDepth is refused as the token scan reaches that depth.
type ArgumentParser struct {
	tool     string
	schema   *jsonschema.Schema
	resolved *jsonschema.Resolved
	// properties are the schema's properties, each resolved on its own, for the
	// validator's problem to be the same every time (firstProblem); nil when the
	// schema does not allow it (propertyValidators). Resolved at the first problem.
	properties func() map[string]*propertyCheck
	maxBytes   int
	// rules is how the parser reads what its schema leaves open (WithRules).
	rules ArgumentRules
	// doc is the schema as JSON and refs its references, for the count of the
	// schemas checking a value applies (applications); doc is nil when the
	// schema could not be read so.
	doc  any
	refs *refGraph
}

// ArgumentRules says how an ArgumentParser reads an integer float64 cannot hold
// and a value under a $ref: a chain's arguments are read again when its session
// is refolded or verified, as the rules its task was recorded under read them
// (actors' chainArguments).
type ArgumentRules int

const (
	// ArgumentsExact refuses an integer written without a fraction or an exponent
	// that neither int64 nor float64 holds as written, and coerces a value under
	// a local $ref as the schema it names says. It is the default.
	ArgumentsExact ArgumentRules = iota
	// ArgumentsRounded reads such an integer as the float64 nearest it
	// (10000000000000000001 is 10000000000000000000), and coerces no value
	// under a $ref (the validator checks it as it was written), as the parser
	// did before ArgumentsExact.
	ArgumentsRounded
	// ArgumentsExactNullsByType is ArgumentsExact reading a null as the parser
	// did before ArgumentsExact checked it against its property's whole schema: a
	// null for an optional property is its absence only when the property's own
	// type (not one under anyOf, oneOf or a $ref) leaves null out, and a null
	// for a required property whose schema refuses it through anyOf or oneOf is
	// the validator's to refuse. A chain's arguments recorded under decision
	// rules 13 are read so (actors' chainArguments).
	ArgumentsExactNullsByType
)

// WithRules returns the parser reading arguments as rules says. p is not changed.
func (p *ArgumentParser) WithRules(rules ArgumentRules) *ArgumentParser {
	if p.rules == rules {
		return p
	}
	c := *p
	c.rules = rules
	return &c
}

// number is number(n) under the parser's rules.
func (p *ArgumentParser) number(n json.Number) any {
	if p.rules == ArgumentsRounded {
		return roundedNumber(n)
	}
	return number(n)
}

// NewArgumentParser returns the parser of arguments for the schema (a JSON Schema
// object; empty means any object) of the tool named tool. maxBytes bounds the
// argument text (0: DefaultMaxArguments). It fails on a schema that is not valid
// JSON Schema, whose type is not "object", whose references go round without
// a value between (checkRefCycles), by whatever name they give their target, or
// under which checking arguments would apply schemas too many times: branches
// that share a $ref, level after level (checkApplications).
func NewArgumentParser(tool string, schema json.RawMessage, maxBytes int) (*ArgumentParser, error) {
	s := &jsonschema.Schema{Type: "object"}
	if len(strings.TrimSpace(string(schema))) > 0 {
		s = new(jsonschema.Schema)
		if err := json.Unmarshal(schema, s); err != nil {
			return nil, fmt.Errorf("tools: tool %q: its parameters are not a JSON Schema: %w", tool, err)
		}
	}
	return newArgumentParser(tool, s, maxBytes)
}

// mustArgumentParser is NewArgumentParser for a built-in tool's constant schema: it
// panics on a schema the parser cannot use, a programming error.
func mustArgumentParser(tool, schema string) *ArgumentParser {
	p, err := NewArgumentParser(tool, json.RawMessage(schema), 0)
	if err != nil {
		panic(err)
	}
	return p
}

func newArgumentParser(tool string, s *jsonschema.Schema, maxBytes int) (*ArgumentParser, error) {
	if t := schemaType(s); t != "" && t != "object" && !slices.Contains(s.Types, "object") {
		return nil, fmt.Errorf("tools: tool %q: its parameters have the type %q: arguments are a JSON object, so want \"object\"", tool, t)
	}
	if err := checkSchemaTypes(s); err != nil {
		return nil, fmt.Errorf("tools: tool %q: its parameters schema: %w", tool, err)
	}
	doc, refs, err := checkRefCycles(s)
	if err != nil {
		return nil, fmt.Errorf("tools: tool %q: its parameters schema: %w", tool, err)
	}
	resolved, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("tools: tool %q: its parameters schema: %w", tool, err)
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxArguments
	}
	return &ArgumentParser{tool: tool, schema: s, resolved: resolved, maxBytes: maxBytes, doc: doc, refs: refs,
		properties: sync.OnceValue(func() map[string]*propertyCheck { return propertyValidators(s) })}, nil
}

// jsonTypes are the types of JSON Schema (its "type" keyword), sorted.
var jsonTypes = []string{"array", "boolean", "integer", "null", "number", "object", "string"}

// checkSchemaTypes fails on a schema, or one under it, whose type JSON Schema does
// not have ("int", "str", a typo): the validator takes it, and then refuses every
// value ("n" must be int, not the number 21), so that no call could pass. The error
// names the schema by where its values are in the arguments ("tags[]", "a.b"), or
// by its definition ("$defs.d").
func checkSchemaTypes(s *jsonschema.Schema) error {
	seen := map[*jsonschema.Schema]bool{}
	var walk func(s *jsonschema.Schema, at string) error
	walk = func(s *jsonschema.Schema, at string) error {
		if s == nil || seen[s] {
			return nil
		}
		seen[s] = true
		for _, t := range append([]string{s.Type}, s.Types...) {
			if t != "" && !slices.Contains(jsonTypes, t) {
				where := "the arguments"
				if at != "" {
					where = strconv.Quote(at)
				}
				return fmt.Errorf("%s: unknown type %q (JSON Schema's types are %s)", where, t, strings.Join(jsonTypes, ", "))
			}
		}
		v := reflect.ValueOf(s).Elem()
		for i := range v.NumField() {
			f := v.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			child := func(key string) string { // where a child's values are
				switch {
				case name == "properties" || name == "patternProperties" || name == "dependentSchemas":
					return strings.TrimPrefix(at+"."+key, ".")
				case name == "$defs" || name == "definitions":
					return name + "." + key
				case f.Name == "Items" || f.Name == "ItemsArray" || name == "prefixItems" || name == "additionalItems" || name == "contains":
					return at + "[]"
				}
				return at
			}
			var err error
			switch c := v.Field(i).Interface().(type) {
			case *jsonschema.Schema:
				err = walk(c, child(""))
			case []*jsonschema.Schema:
				for _, e := range c {
					if err = walk(e, child("")); err != nil {
						break
					}
				}
			case map[string]*jsonschema.Schema:
				for _, k := range slices.Sorted(maps.Keys(c)) {
					if err = walk(c[k], child(k)); err != nil {
						break
					}
				}
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	return walk(s, "")
}

// propertyValidators resolves each property of s on its own, and theirs in turn:
// the validator (jsonschema.Resolved.Validate) checks an object's properties in Go's
// map order and reports the first that fails, so that of two failing fields either
// could be named, and a chain's refusal, which its session decides
// (actors.decideChain) and replay verify decides again, would differ from run to
// run. firstProblem checks them in key order instead. It returns nil, and the
// validator's own problem stands, for a schema that refers to others ($ref, $id,
// $anchor), which checking a property on its own could read otherwise.
func propertyValidators(s *jsonschema.Schema) map[string]*propertyCheck {
	b, err := json.Marshal(s)
	if err != nil {
		return nil
	}
	for _, kw := range []string{`"$ref"`, `"$dynamicRef"`, `"$recursiveRef"`, `"$id"`, `"$anchor"`, `"$dynamicAnchor"`, `"$recursiveAnchor"`} {
		if bytes.Contains(b, []byte(kw)) {
			return nil
		}
	}
	checks, ok := propertyChecks(s, s.Schema)
	if !ok {
		return nil
	}
	return checks
}

// propertyCheck is a property's schema resolved on its own, and its properties'.
type propertyCheck struct {
	resolved   *jsonschema.Resolved
	properties map[string]*propertyCheck
}

// propertyChecks resolves each property of s on its own, under the draft of the
// whole schema; false when one does not resolve.
func propertyChecks(s *jsonschema.Schema, draft string) (map[string]*propertyCheck, bool) {
	if len(s.Properties) == 0 {
		return nil, true
	}
	out := make(map[string]*propertyCheck, len(s.Properties))
	for k, ps := range s.Properties {
		if ps == nil {
			return nil, false
		}
		c := ps.CloneSchemas()
		c.Schema = draft
		r, err := c.Resolve(nil)
		if err != nil {
			return nil, false
		}
		nested, ok := propertyChecks(ps, draft)
		if !ok {
			return nil, false
		}
		out[k] = &propertyCheck{resolved: r, properties: nested}
	}
	return out, true
}

// firstProblem is the problem the validator found in v, err, said the same way
// every time: when the validator found it in one of v's properties, it is what the
// validator says of the first failing property in key order (and so on down), as
// it says it when it checks that property first, one of the problems it could
// report (which one it checks first is up to Go's map order).
func (p *ArgumentParser) firstProblem(v any, err error) string {
	if m, ok := v.(map[string]any); ok {
		if text, ok := firstFailing(p.properties(), m, strings.TrimPrefix(err.Error(), "validating root: ")); ok {
			return validatorText("validating root: " + text)
		}
	}
	return validatorProblem(err)
}

// firstFailing returns, for the object m whose schema's error is text (as the
// validator of that schema resolved on its own says it, without its leading
// "validating root: "), the error of its first property in key order that fails
// its schema, as the validator of m's schema says it; false when text is not of a
// property (the validator checks a schema's other keywords first: it found none
// failing only when it says a property failed).
func firstFailing(checks map[string]*propertyCheck, m map[string]any, text string) (string, bool) {
	if checks == nil || !strings.HasPrefix(text, "validating /properties/") {
		return "", false
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		c := checks[k]
		if c == nil {
			continue
		}
		perr := c.resolved.Validate(m[k])
		if perr == nil {
			continue
		}
		sub := strings.TrimPrefix(perr.Error(), "validating root: ")
		if o, ok := m[k].(map[string]any); ok {
			if nested, ok := firstFailing(c.properties, o, sub); ok {
				sub = nested
			}
		}
		return underProperty(k, sub), true
	}
	return "", false
}

// Schema returns the parser's schema. It must not be modified.
func (p *ArgumentParser) Schema() *jsonschema.Schema { return p.schema }

// Parse reads raw (a model's argument text) and returns the arguments as a JSON
// object: strings, float64 or int64 numbers, booleans, nil, []any and map[string]any,
// coerced to the schema's types, with the schema's defaults filled in. Empty text and
// null mean {}.
func (p *ArgumentParser) Parse(raw string) (map[string]any, error) {
	v, err := p.decode(raw)
	if err != nil {
		return nil, err
	}
	m, err := p.check(v, false)
	if err != nil {
		return nil, err
	}
	if err := p.resolved.ApplyDefaults(&m); err != nil {
		return nil, &ArgumentError{Tool: p.tool, Reason: "the schema's defaults do not apply: " + err.Error()}
	}
	return m, nil
}

// Check reads raw as Parse does, refusing what Parse refuses, and returns the
// arguments as compact JSON changed only where a value was coerced to the
// schema's type ("3" for an integer is 3, "true" for a boolean true, 12345 for a
// string "12345"): the schema's defaults are not filled in, a null stays, and a
// number keeps its digits as written (an integer float64 does not hold as written
// is checked as the float64 nearest it and passed on as written). It is for
// arguments going to a tool that reads them itself, such as an MCP server's, for
// which a default filled in or a null dropped would change the call.
func (p *ArgumentParser) Check(raw string) (json.RawMessage, error) {
	v, err := p.decode(raw)
	if err != nil {
		return nil, err
	}
	written, err := p.decode(raw) // the same value, for its numbers as written
	if err != nil {
		return nil, err
	}
	m, err := p.check(v, true)
	if err != nil {
		return nil, err
	}
	return marshalCompact(keepWritten(m, written, MaxArgumentDepth))
}

// keepWritten returns written (the arguments as read, their numbers json.Numbers)
// with what checked (the same arguments coerced) coerced in it: a string coerced
// to a number becomes the number as written in it, to a boolean the boolean, to
// an array or an object what it holds, numbers as written; a number or a boolean
// coerced to a string the string. Everything else stays as written: nulls, the
// digits of numbers, fields checked dropped.
func keepWritten(checked, written any, maxDepth int) any {
	switch w := written.(type) {
	case string:
		switch c := checked.(type) {
		case int64, float64:
			return json.Number(strings.TrimSpace(w))
		case bool:
			return c
		case map[string]any, []any:
			if inner, err := decodeJSON(strings.TrimSpace(w), maxDepth); err == nil {
				return keepWritten(c, inner, maxDepth)
			}
			return c
		}
	case json.Number, bool:
		if c, ok := checked.(string); ok {
			return c
		}
	case map[string]any:
		if c, ok := checked.(map[string]any); ok {
			for k, wv := range w {
				if cv, ok := c[k]; ok {
					w[k] = keepWritten(cv, wv, maxDepth)
				}
			}
		}
	case []any:
		if c, ok := checked.([]any); ok && len(c) == len(w) {
			for i := range w {
				w[i] = keepWritten(c[i], w[i], maxDepth)
			}
		}
	}
	return written
}

// decode reads raw (a model's argument text) as a JSON object or key=value pairs,
// its numbers json.Numbers, its pairs' values strings.
func (p *ArgumentParser) decode(raw string) (any, error) {
	if len(raw) > p.maxBytes {
		return nil, &ArgumentError{Tool: p.tool, Reason: fmt.Sprintf("the arguments are %d bytes long; the limit is %d", len(raw), p.maxBytes)}
	}
	text := strings.TrimSpace(raw)
	switch {
	case text == "" || text == "null":
		return map[string]any{}, nil
	case text[0] == '{':
		v, err := decodeJSON(text, MaxArgumentDepth)
		if err != nil {
			return nil, &ArgumentError{Tool: p.tool, Reason: err.Error() + "; want a JSON object such as " + p.example()}
		}
		return v, nil
	case strings.ContainsRune(`["-0123456789`, rune(text[0])) || text == "true" || text == "false":
		return nil, &ArgumentError{Tool: p.tool, Reason: "the arguments are a JSON " + jsonKindOf(text) + "; want a JSON object such as " + p.example()}
	}
	pairs, err := ParsePairs(text)
	if err != nil {
		return nil, &ArgumentError{Tool: p.tool, Reason: "the arguments are neither a JSON object nor key=value pairs (" + err.Error() + "); want a JSON object such as " + p.example()}
	}
	m := make(map[string]any, len(pairs))
	for k, s := range pairs {
		m[k] = s
	}
	return m, nil
}

// applications counts the schemas checking v against the schema at ptr applies
// (the validator applies every anyOf and oneOf branch and every $ref anew, to
// the value and to each value inside it that a keyword reaches), into n, and
// reports false once they are over maxSchemaApplications: it stops there, so
// that it takes no longer than the bound however many the check would apply.
// Where the keywords leave it open (patternProperties, dependencies), a schema
// is counted as applied.
func (p *ArgumentParser) applications(ptr string, v any, n *int) bool {
	if *n++; *n > maxSchemaApplications {
		return false
	}
	node, ok := pointerAt(p.doc, ptr).(map[string]any)
	if !ok {
		return true
	}
	for _, next := range p.refs.sameValue(node, ptr) {
		if !p.applications(next, v, n) {
			return false
		}
	}
	at := func(kw string) (string, bool) {
		_, ok := node[kw].(map[string]any)
		return ptr + "/" + kw, ok
	}
	switch x := v.(type) {
	case map[string]any:
		props, _ := node["properties"].(map[string]any)
		patterns, _ := node["patternProperties"].(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(x)) {
			var to []string
			if _, ok := props[k]; ok {
				to = append(to, ptr+"/properties/"+pointerToken(k))
			} else if s, ok := at("additionalProperties"); ok {
				to = append(to, s)
			}
			for _, pk := range slices.Sorted(maps.Keys(patterns)) {
				to = append(to, ptr+"/patternProperties/"+pointerToken(pk))
			}
			if s, ok := at("unevaluatedProperties"); ok {
				to = append(to, s)
			}
			for _, s := range to {
				if !p.applications(s, x[k], n) {
					return false
				}
			}
			if s, ok := at("propertyNames"); ok && !p.applications(s, k, n) {
				return false
			}
		}
	case []any:
		prefix, _ := node["prefixItems"].([]any)
		kw := "prefixItems"
		if list, ok := node["items"].([]any); ok && len(prefix) == 0 {
			prefix, kw = list, "items" // drafts before 2020-12
		}
		for i, item := range x {
			var to []string
			if i < len(prefix) {
				to = append(to, fmt.Sprintf("%s/%s/%d", ptr, kw, i))
			} else if s, ok := at("items"); ok {
				to = append(to, s)
			} else if s, ok := at("additionalItems"); ok {
				to = append(to, s)
			}
			for _, k := range []string{"contains", "unevaluatedItems"} {
				if s, ok := at(k); ok {
					to = append(to, s)
				}
			}
			for _, s := range to {
				if !p.applications(s, item, n) {
					return false
				}
			}
		}
	}
	return true
}

// check coerces v to the schema and validates it. written says that the numbers
// are passed on as written (Check): an integer float64 does not hold as written
// is checked as the float64 nearest it.
func (p *ArgumentParser) check(v any, written bool) (map[string]any, error) {
	w := walker{p: p, number: p.number}
	if written {
		w.number = roundedNumber
	}
	v = w.walk(v, p.schema, "", 0)
	if n := 0; len(w.problems) == 0 && p.doc != nil && !p.applications("", v, &n) {
		// The validator would apply the schema's branches to the arguments
		// more often than it could in reasonable time: a schema whose branches
		// share a $ref through a value, level after level, doubles the work at
		// each level of the arguments, and one of many variants (anyOf, oneOf)
		// applies each to every value the arguments hold.
		return nil, &ArgumentError{Tool: p.tool, Reason: fmt.Sprintf("the arguments are nested too deeply for the tool's schema, or hold too many values for it: "+
			"checking them would apply its anyOf, oneOf and allOf branches and $refs more than %d times; send fewer values, nested less deeply", maxSchemaApplications)}
	}
	if len(w.problems) == 0 {
		if err := p.resolved.Validate(v); err != nil {
			w.problems = append(w.problems, p.firstProblem(v, err))
		}
	}
	if len(w.problems) > 0 {
		ae := &ArgumentError{Tool: p.tool, Field: w.field, Reason: strings.Join(w.problems, "; ")}
		if w.more > 0 {
			ae.Reason += fmt.Sprintf("; and %d more", w.more)
		}
		return nil, ae
	}
	return v.(map[string]any), nil
}

// ParseJSON is Parse returning the arguments as compact JSON.
func (p *ArgumentParser) ParseJSON(raw string) (json.RawMessage, error) {
	m, err := p.Parse(raw)
	if err != nil {
		return nil, err
	}
	return marshalCompact(m)
}

// example is a short JSON object naming the required properties, for error
// messages: {"url": ..., "method": ...}.
func (p *ArgumentParser) example() string {
	names := p.schema.Required
	if len(names) == 0 {
		names = slices.Sorted(maps.Keys(p.schema.Properties))
	}
	if len(names) == 0 {
		return "{}"
	}
	if len(names) > 4 {
		names = names[:4]
	}
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = strconv.Quote(n) + ": …"
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func jsonKindOf(text string) string {
	switch text[0] {
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	}
	return "number"
}

// decodeJSON reads text as one JSON value, refusing nesting deeper than maxDepth as
// the token scan reaches it, and duplicate keys. Numbers stay json.Number.
func decodeJSON(text string, maxDepth int) (any, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	v, err := readValue(dec, 0, maxDepth)
	if err != nil {
		return nil, jsonProblem(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("unexpected text after the JSON value, at byte %d", dec.InputOffset())
	}
	return v, nil
}

// errTooDeep is returned by readValue when the nesting passes its limit.
type errTooDeep struct{ limit int }

func (e errTooDeep) Error() string {
	return fmt.Sprintf("the JSON nests objects and arrays deeper than %d levels", e.limit)
}

func readValue(dec *json.Decoder, depth, maxDepth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil // string, json.Number, bool or nil
	}
	if depth >= maxDepth {
		return nil, errTooDeep{maxDepth}
	}
	switch d {
	case '{':
		m := map[string]any{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string)
			if _, dup := m[k]; dup {
				return nil, fmt.Errorf("the key %q appears twice in one object", k)
			}
			if m[k], err = readValue(dec, depth+1, maxDepth); err != nil {
				return nil, err
			}
		}
		if _, err := dec.Token(); err != nil {
			return nil, err
		}
		return m, nil
	case '[':
		a := []any{}
		for dec.More() {
			v, err := readValue(dec, depth+1, maxDepth)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		if _, err := dec.Token(); err != nil {
			return nil, err
		}
		return a, nil
	}
	return nil, fmt.Errorf("unexpected %q", d)
}

// jsonProblem says what was wrong with JSON text, without Go's vocabulary.
func jsonProblem(err error) error {
	var syn *json.SyntaxError
	var deep errTooDeep
	switch {
	case errors.As(err, &deep):
		return err
	case errors.As(err, &syn):
		return fmt.Errorf("malformed JSON at byte %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return errors.New("malformed JSON: the text ends early")
	}
	return fmt.Errorf("malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// checkRefCycles fails on a schema in which a reference leads back to where it
// is without going into a value (through properties, items and the like): to
// "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"allOf": [{"$ref": "#/$defs/A"}]}}.
// The validator follows such refs for as long as its stack lasts, and a Go
// stack overflow is not a panic that can be recovered: it ends the process. A
// schema that refers to itself through a value (a tree whose children are
// trees) is fine: the arguments' depth bounds it.
//
// What applies a schema to the same value as the one that holds it is followed:
// $ref, $dynamicRef and $recursiveRef, allOf, anyOf, oneOf, not, if, then, else,
// dependentSchemas and the schemas of dependencies. A reference is followed to
// every schema it may name (refTargets), never to fewer than the validator
// resolves it to: a loop the validator could go round is refused, at the price
// of refusing, in a schema of several resources ($id), a loop only another
// resource's schemas would make. Only schemas are read for refs: an object in a
// default, examples, const or enum value is data, whatever it holds.
//
// It returns the schema as JSON and its refGraph, for applications (nil when
// the schema does not marshal: Resolve says what is wrong with it).
func checkRefCycles(s *jsonschema.Schema) (any, *refGraph, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, nil, nil
	}
	var root any
	if json.Unmarshal(b, &root) != nil {
		return nil, nil, nil
	}
	g := newRefGraph(root)
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var visit func(ptr string) (string, bool)
	visit = func(ptr string) (string, bool) {
		switch state[ptr] {
		case open:
			return ptr, true
		case done:
			return "", false
		}
		node, ok := pointerAt(root, ptr).(map[string]any)
		if !ok {
			state[ptr] = done
			return "", false
		}
		state[ptr] = open
		for _, n := range g.sameValue(node, ptr) {
			if at, ok := visit(n); ok {
				return at, true
			}
		}
		state[ptr] = done
		return "", false
	}
	// Every schema in the document may be where a cycle is entered.
	for _, ptr := range g.schemas {
		if found, cycle := visit(ptr); cycle {
			return nil, nil, fmt.Errorf("its $ref at %q leads back to itself without a value between: no value could be checked against it", "#"+found)
		}
	}
	return root, g, checkApplications(root, g)
}

// sameValue returns the pointers of the schemas that node, the schema at ptr,
// applies to the value it checks itself: its references' targets (refTargets),
// its allOf, anyOf and oneOf branches, not, if, then and else, and the schemas
// of dependentSchemas and dependencies.
func (g *refGraph) sameValue(node map[string]any, ptr string) []string {
	var next []string
	for _, kw := range []string{"$ref", "$dynamicRef", "$recursiveRef"} {
		if ref, ok := node[kw].(string); ok {
			next = append(next, g.refTargets(ref)...)
		}
	}
	for _, kw := range []string{"allOf", "anyOf", "oneOf"} {
		if list, ok := node[kw].([]any); ok {
			for i := range list {
				next = append(next, fmt.Sprintf("%s/%s/%d", ptr, kw, i))
			}
		}
	}
	for _, kw := range []string{"not", "if", "then", "else"} {
		if _, ok := node[kw].(map[string]any); ok {
			next = append(next, ptr+"/"+kw)
		}
	}
	// dependencies (draft-07) holds schemas and lists of names: the schemas
	// apply to the object that holds the name, as dependentSchemas' do.
	for _, kw := range []string{"dependentSchemas", "dependencies"} {
		if deps, ok := node[kw].(map[string]any); ok {
			for _, k := range slices.Sorted(maps.Keys(deps)) {
				if _, ok := deps[k].(map[string]any); ok {
					next = append(next, ptr+"/"+kw+"/"+pointerToken(k))
				}
			}
		}
	}
	return next
}

// valueParts returns the pointers of the schemas that node, the schema at ptr,
// applies to the values inside the value it checks: its properties' (and
// patternProperties', additionalProperties, propertyNames,
// unevaluatedProperties) and its items' (items, prefixItems, additionalItems,
// contains, unevaluatedItems).
func valueParts(node map[string]any, ptr string) []string {
	var next []string
	for _, kw := range []string{"additionalProperties", "propertyNames", "unevaluatedProperties", "additionalItems", "contains", "unevaluatedItems", "items"} {
		if _, ok := node[kw].(map[string]any); ok {
			next = append(next, ptr+"/"+kw)
		}
	}
	for _, kw := range []string{"prefixItems", "items"} {
		if list, ok := node[kw].([]any); ok {
			for i := range list {
				next = append(next, fmt.Sprintf("%s/%s/%d", ptr, kw, i))
			}
		}
	}
	for _, kw := range []string{"properties", "patternProperties"} {
		if m, ok := node[kw].(map[string]any); ok {
			for _, k := range slices.Sorted(maps.Keys(m)) {
				next = append(next, ptr+"/"+kw+"/"+pointerToken(k))
			}
		}
	}
	return next
}

// maxSchemaApplications bounds how many times the schemas of a tool's
// parameters may be applied in checking one value: a schema over it is refused
// (checkApplications), and so are arguments whose check would apply them more
// often (applications).
const maxSchemaApplications = 100_000

// checkApplications fails on a schema document (root, its refGraph g, whose
// references checkRefCycles found going round through no value) under which
// checking arguments would apply schemas too many times: each anyOf, oneOf or
// allOf branch and each $ref is applied to the value anew (the validator keeps
// no result), so that branches that share a $ref, level after level ({"anyOf":
// [{"$ref": "#/$defs/A1"}, {"$ref": "#/$defs/A1"}]}, A1 alike, and so on), make
// the work double at each level: 30 levels, a billion applications, for hours
// on one call. What it counts is the applications of the root in checking one
// value, the one that makes the most of them: the schemas applied to the value
// itself add up, and of the values inside it (properties, items) the one
// counted is the one that makes the most, a $ref that comes back through a
// value counted once. Counted for a value of each field at once, the count was
// the size of the schema with its $refs written out, which grows with the
// schema's breadth and makes no more work than the arguments bring: a schema
// of 250 variants of a webhook's payload (63 KiB) was refused, its payload
// checked in milliseconds. Arguments with many values are bounded as they are
// checked (applications). Each schema's count is counted once (memoized), so
// the check takes time in proportion to the schema's size.
func checkApplications(root any, g *refGraph) error {
	counts := map[string]int{}
	onPath := map[string]bool{}
	var over string // the first schema counted over the bound
	var count func(ptr string) int
	count = func(ptr string) int {
		if n, ok := counts[ptr]; ok {
			return n
		}
		node, ok := pointerAt(root, ptr).(map[string]any)
		if !ok || onPath[ptr] {
			return 1 // true or false, or a schema that holds a value of its own
		}
		onPath[ptr] = true
		n := 1
		for _, next := range g.sameValue(node, ptr) {
			n = min(n+count(next), maxSchemaApplications+1)
		}
		inside := 0
		for _, next := range valueParts(node, ptr) {
			inside = max(inside, count(next))
		}
		n = min(n+inside, maxSchemaApplications+1)
		delete(onPath, ptr)
		counts[ptr] = n
		if n > maxSchemaApplications && over == "" {
			over = ptr
		}
		return n
	}
	if n := count(""); n > maxSchemaApplications {
		return fmt.Errorf("its anyOf, oneOf and allOf branches and $refs apply a schema more than %d times in checking one value against the schema at %q "+
			"(branches that share a $ref, level after level, double the work at each): the arguments could not be checked in reasonable time", maxSchemaApplications, "#"+over)
	}
	return nil
}

// refGraph is what checkRefCycles knows of a schema document (the schema as
// JSON) to follow its references: where its schemas are, which of them start a
// resource of their own ($id), and which carry an anchor.
type refGraph struct {
	// schemas are the JSON Pointers of the document's schemas, in document
	// order (keys sorted): not the values of default, examples, const and enum.
	schemas []string
	// resources are the pointers of the root and of every schema with an $id:
	// the documents a reference's JSON Pointer may be read in.
	resources []string
	// anchors are the pointers of the schemas that a fragment names: by
	// $anchor, $dynamicAnchor, or an $id with a fragment ("#a", draft-07's
	// anchors).
	anchors map[string][]string
}

func newRefGraph(root any) *refGraph {
	g := &refGraph{resources: []string{""}, anchors: map[string][]string{}}
	var walk func(v any, ptr string)
	walk = func(v any, ptr string) {
		node, ok := v.(map[string]any)
		if !ok {
			return
		}
		g.schemas = append(g.schemas, ptr)
		for _, kw := range []string{"$anchor", "$dynamicAnchor"} {
			if a, ok := node[kw].(string); ok && a != "" {
				g.anchors[a] = append(g.anchors[a], ptr)
			}
		}
		if id, ok := node["$id"].(string); ok && id != "" {
			if ptr != "" {
				g.resources = append(g.resources, ptr)
			}
			// jsonschema-go names a draft-07 anchor by the $id less its
			// leading '#' ("#a" is a), and a reference by its fragment.
			names := []string{strings.TrimPrefix(id, "#")}
			if _, frag, ok := strings.Cut(id, "#"); ok {
				names = append(names, frag)
			}
			if u, err := url.Parse(id); err == nil && u.Fragment != "" {
				names = append(names, u.Fragment)
			}
			slices.Sort(names)
			for _, a := range slices.Compact(names) {
				g.anchors[a] = append(g.anchors[a], ptr)
			}
		}
		for _, kw := range slices.Sorted(maps.Keys(node)) {
			at := ptr + "/" + pointerToken(kw)
			holds := keywordHolds(kw)
			switch x := node[kw].(type) {
			case map[string]any:
				switch {
				case holds == holdsSchema || kw == "items":
					walk(x, at)
				case holds == holdsSchemaMap:
					for _, k := range slices.Sorted(maps.Keys(x)) {
						walk(x[k], at+"/"+pointerToken(k))
					}
				}
			case []any:
				if holds == holdsSchemaList || kw == "items" {
					for i, e := range x {
						walk(e, fmt.Sprintf("%s/%d", at, i))
					}
				}
			}
		}
	}
	walk(root, "")
	return g
}

// refTargets returns the pointers of the schemas the reference ref may name:
// every one it names as jsonschema-go resolves it (Schema.Resolve) and maybe
// more. The part before '#', a URI resolved against the base of where the ref
// is, names a resource; any resource is taken. The fragment is read as written
// and percent-decoded (jsonschema-go decodes it): empty, it names the resource;
// a JSON Pointer is read in each resource; anything else is an anchor, and
// names every schema with that anchor ($dynamicRef's dynamic anchors are looked
// for by that name too, in whichever resource the validator is in).
func (g *refGraph) refTargets(ref string) []string {
	_, frag, _ := strings.Cut(ref, "#")
	frags := []string{frag}
	if u, err := url.Parse(ref); err == nil && u.Fragment != frag {
		frags = append(frags, u.Fragment)
	}
	var out []string
	for _, f := range frags {
		switch {
		case f == "":
			out = append(out, g.resources...)
		case strings.HasPrefix(f, "/"):
			for _, r := range g.resources {
				out = append(out, r+f)
			}
		default:
			out = append(out, g.anchors[f]...)
		}
	}
	return out
}

// What a keyword of JSON Schema (2020-12, and drafts 4 to 2019-09) holds.
const (
	holdsValue      = iota // no schema: a value (default, examples, const, enum), a number, a name
	holdsSchema            // one schema
	holdsSchemaList        // a list of schemas
	holdsSchemaMap         // schemas by name
)

// keywordHolds says what the keyword kw holds. items holds one schema or a list
// (drafts before 2020-12); dependencies' values that are objects are schemas, its
// lists are of names.
func keywordHolds(kw string) int {
	switch kw {
	case "not", "if", "then", "else", "additionalItems", "contains", "additionalProperties",
		"propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema":
		return holdsSchema
	case "allOf", "anyOf", "oneOf", "prefixItems":
		return holdsSchemaList
	case "properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies":
		return holdsSchemaMap
	}
	return holdsValue
}

// pointerToken writes a key as a JSON Pointer's token ('~' is ~0, '/' is ~1).
func pointerToken(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

// pointerAt returns the value at a JSON Pointer ("" is the whole) in v, or nil.
func pointerAt(v any, ptr string) any {
	if ptr == "" {
		return v
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = refName(tok)
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// maxRefHops bounds the $refs followed from one schema to the schema it stands
// for (a ref to a ref…), so that refs that go round end.
const maxRefHops = 32

// deref returns the schema a local $ref of s names ("#/$defs/Item", as Pydantic
// and zod write nested types; "#/definitions/Item"; "#" for the whole), followed
// to one without a $ref, for the walker to coerce and check the value as that
// schema says (the validator checks it whole, refs and all); s itself when it has
// no $ref, or one the walker cannot follow. Keywords beside the $ref are kept
// (overlay): {"$ref": "#/$defs/Base", "properties": {"n": {"type": "integer"}}}
// coerces n as well as Base's properties.
func (p *ArgumentParser) deref(s *jsonschema.Schema) *jsonschema.Schema {
	if p.rules == ArgumentsRounded {
		return s
	}
	return p.derefHops(s, 0)
}

func (p *ArgumentParser) derefHops(s *jsonschema.Schema, hops int) *jsonschema.Schema {
	if s == nil || s.Ref == "" || hops >= maxRefHops {
		return s
	}
	var next *jsonschema.Schema
	switch ref := s.Ref; {
	case ref == "#":
		next = p.schema
	case strings.HasPrefix(ref, "#/$defs/"):
		next = p.schema.Defs[refName(ref[len("#/$defs/"):])]
	case strings.HasPrefix(ref, "#/definitions/"):
		next = p.schema.Definitions[refName(ref[len("#/definitions/"):])]
	}
	if next == nil {
		return s
	}
	next = p.derefHops(next, hops+1)
	siblings := *s
	siblings.Ref = ""
	if reflect.ValueOf(siblings).IsZero() {
		return next
	}
	return overlay(next, &siblings)
}

// overlay returns the schema a $ref's target (base) and the keywords beside the
// $ref (over) stand for together, for the walker: over's properties beside
// base's (over's where both name one), both's required fields, and over's every
// other keyword it sets in place of base's. The validator checks both, as JSON
// Schema says; the walker coerces a value as the one schema would.
func overlay(base, over *jsonschema.Schema) *jsonschema.Schema {
	m := *base
	bv, ov := reflect.ValueOf(&m).Elem(), reflect.ValueOf(over).Elem()
	for i := range ov.NumField() {
		if f := ov.Field(i); !f.IsZero() {
			bv.Field(i).Set(f)
		}
	}
	if over.Type != "" {
		m.Types = nil
	} else if over.Types != nil {
		m.Type = ""
	}
	if len(base.Properties) > 0 && len(over.Properties) > 0 {
		m.Properties = maps.Clone(base.Properties)
		maps.Copy(m.Properties, over.Properties)
		m.PropertyOrder = slices.Clone(base.PropertyOrder)
		for _, k := range over.PropertyOrder {
			if !slices.Contains(m.PropertyOrder, k) {
				m.PropertyOrder = append(m.PropertyOrder, k)
			}
		}
	}
	if len(base.Required) > 0 && len(over.Required) > 0 {
		m.Required = slices.Clone(base.Required)
		for _, r := range over.Required {
			if !slices.Contains(m.Required, r) {
				m.Required = append(m.Required, r)
			}
		}
	}
	return &m
}

// refName reads a JSON Pointer's token (~1 is '/', ~0 is '~').
func refName(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
}

// walker coerces and checks one value against a schema, collecting problems.
type walker struct {
	p        *ArgumentParser
	problems []string
	more     int
	field    string // the path of the first problem
	// number reads a JSON number (ArgumentParser.number; roundedNumber for Check).
	number func(json.Number) any
	// schemaFacts answers what the schemas of null properties allow (facts).
	schemaFacts *schemaFacts
}

func (w *walker) fail(path, format string, args ...any) {
	if w.field == "" && len(w.problems) == 0 {
		w.field = path
	}
	if len(w.problems) >= maxProblems {
		w.more++
		return
	}
	w.problems = append(w.problems, clipQuoted(fmt.Sprintf(format, args...)))
}

// walk returns v coerced to s (numbers made float64 or int64), reporting what does
// not conform. depth is v's nesting depth in the arguments.
func (w *walker) walk(v any, s *jsonschema.Schema, path string, depth int) any {
	s = w.p.deref(s)
	types := schemaTypes(s)
	if n, ok := v.(json.Number); ok {
		if len(types) > 0 && !slices.Contains(types, "number") && !slices.Contains(types, "integer") && slices.Contains(types, "string") {
			v = string(n) // a number where only a string will do: its text as written
		} else if v = w.number(n); v == nil {
			w.fail(path, "%s %s", name(path), numberProblem(n))
			return nil
		}
	}
	if s == nil {
		return w.plain(v, path, depth)
	}
	if never(s) {
		w.fail(path, "%s is not allowed", name(path))
		return v
	}
	if len(types) > 0 && !typeIn(v, types) {
		for _, t := range types {
			if c, ok := coerce(v, t, MaxArgumentDepth-depth, w.number); ok {
				v = c
				break
			}
		}
		if n, ok := v.(json.Number); ok { // from a string that held JSON
			v = w.number(n)
		}
		if !typeIn(v, types) {
			w.fail(path, "%s must be %s, not %s", name(path), wantTypes(types), describe(v))
			return v
		}
	}
	if len(s.Enum) > 0 && !slices.ContainsFunc(s.Enum, func(e any) bool { return sameJSON(e, v) }) {
		opts := make([]string, len(s.Enum))
		for i, e := range s.Enum {
			opts[i] = jsonText(e)
		}
		w.fail(path, "%s must be one of %s, not %s", name(path), strings.Join(opts, ", "), jsonText(v))
		return v
	}
	if s.Const != nil && !sameJSON(*s.Const, v) {
		w.fail(path, "%s must be %s, not %s", name(path), jsonText(*s.Const), jsonText(v))
		return v
	}
	switch x := v.(type) {
	case map[string]any:
		for _, r := range s.Required {
			if _, ok := x[r]; !ok {
				w.fail(join(path, r), "missing the required field %q", join(path, r))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			ps, known := s.Properties[k]
			if x[k] == nil && known && w.p.rules == ArgumentsExact && !w.facts().matchesNothing(ps, 0) && !w.facts().allowsNull(ps, 0) {
				if !slices.Contains(s.Required, k) {
					delete(x, k) // null for an optional field: as if absent
					continue
				}
				if types := w.facts().unionTypes(ps, 0); len(types) > 0 {
					// Said as a plain type's refusal is ("must be a string, not
					// null"), which the validator does not say of a union.
					w.fail(join(path, k), "%s must be %s, not null", name(join(path, k)), wantTypes(types))
					continue
				}
			}
			if x[k] == nil && known && !slices.Contains(s.Required, k) && !typeIn(nil, schemaTypes(ps)) && len(schemaTypes(ps)) > 0 {
				delete(x, k) // null for an optional field: as if absent
				continue
			}
			if !known {
				if w.patternProperty(s, k) {
					x[k] = w.plain(x[k], join(path, k), depth+1) // the validator checks it
					continue
				}
				ps = s.AdditionalProperties
				if never(ps) {
					fields := "it has none"
					if len(s.Properties) > 0 {
						fields = "the fields are " + strings.Join(propertyNames(s), ", ")
					}
					w.fail(join(path, k), "unknown field %q (%s)", join(path, k), fields)
					continue
				}
			}
			x[k] = w.walk(x[k], ps, join(path, k), depth+1)
		}
	case []any:
		if s.MinItems != nil && len(x) < *s.MinItems {
			w.fail(path, "%s must have at least %d items, not %d", name(path), *s.MinItems, len(x))
		}
		if s.MaxItems != nil && len(x) > *s.MaxItems {
			w.fail(path, "%s must have at most %d items, not %d", name(path), *s.MaxItems, len(x))
		}
		for i := range x {
			var is *jsonschema.Schema
			if i < len(s.PrefixItems) {
				is = s.PrefixItems[i]
			} else if i < len(s.ItemsArray) {
				is = s.ItemsArray[i]
			} else if s.ItemsArray == nil {
				is = s.Items
			}
			x[i] = w.walk(x[i], is, fmt.Sprintf("%s[%d]", path, i), depth+1)
		}
	case string:
		n := utf8.RuneCountInString(x)
		if s.MinLength != nil && n < *s.MinLength {
			w.fail(path, "%s must be at least %d characters long, not %d", name(path), *s.MinLength, n)
		}
		if s.MaxLength != nil && n > *s.MaxLength {
			w.fail(path, "%s must be at most %d characters long, not %d", name(path), *s.MaxLength, n)
		}
	case int64, float64:
		f := toFloat(x)
		switch {
		case s.Minimum != nil && f < *s.Minimum:
			w.fail(path, "%s must be at least %s, not %s", name(path), FormatNumber(*s.Minimum), jsonText(x))
		case s.Maximum != nil && f > *s.Maximum:
			w.fail(path, "%s must be at most %s, not %s", name(path), FormatNumber(*s.Maximum), jsonText(x))
		case s.ExclusiveMinimum != nil && f <= *s.ExclusiveMinimum:
			w.fail(path, "%s must be greater than %s, not %s", name(path), FormatNumber(*s.ExclusiveMinimum), jsonText(x))
		case s.ExclusiveMaximum != nil && f >= *s.ExclusiveMaximum:
			w.fail(path, "%s must be less than %s, not %s", name(path), FormatNumber(*s.ExclusiveMaximum), jsonText(x))
		}
	}
	return v
}

// schemaFacts answers what a property's schema allows (allowsNull,
// matchesNothing, unionTypes) for one walk of a value, each schema's answer
// computed once at each depth it is reached at: the answers depend on nothing
// else (the schema does not change during the walk). Computed anew at each
// reach, branches that share a $ref level after level ({"anyOf": [{"$ref":
// "#/$defs/A1"}, {"$ref": "#/$defs/A1"}]}, A1 alike, and so on) made the work
// double at each level: 2^16 schemas looked at for 16 levels, which the
// schema's bound on applications (maxSchemaApplications) lets through, for each
// null the walk looks at. Memoized, the work grows with the schema's size.
type schemaFacts struct {
	p       *ArgumentParser
	null    map[factKey]bool
	nothing map[factKey]bool
	types   map[factKey][]string
	// steps counts the schemas looked at (an answer not memoized yet).
	steps int
}

// factKey is a schema as a fact of it is asked: the schema (a node of the
// parser's tree, or one deref made) and the depth it is reached at.
type factKey struct {
	s     *jsonschema.Schema
	depth int
}

func newSchemaFacts(p *ArgumentParser) *schemaFacts {
	return &schemaFacts{p: p, null: map[factKey]bool{}, nothing: map[factKey]bool{}, types: map[factKey][]string{}}
}

// facts returns the walk's schemaFacts, made at its first use.
func (w *walker) facts() *schemaFacts {
	if w.schemaFacts == nil {
		w.schemaFacts = newSchemaFacts(w.p)
	}
	return w.schemaFacts
}

// memoFact is fact of s at depth, once(s, depth) the first time it is asked for
// in this walk: each schema's answer at each depth is worked out once (steps
// counts those).
func memoFact[T any](f *schemaFacts, memo map[factKey]T, s *jsonschema.Schema, depth int, once func(*jsonschema.Schema, int) T) T {
	key := factKey{s, depth}
	if v, ok := memo[key]; ok {
		return v
	}
	f.steps++
	v := once(s, depth)
	memo[key] = v
	return v
}

// allowsNull reports whether s lets a value be null: false when s, its local
// $ref followed, matches nothing, has types without "null", an enum without
// null, a const other than null, anyOf or oneOf branches none of which allows
// null, or an allOf branch that does not. Any other schema allows it, as JSON
// Schema says (one without a type takes any value). depth bounds the branches
// followed (maxRefHops).
func (f *schemaFacts) allowsNull(s *jsonschema.Schema, depth int) bool {
	if s == nil || depth > maxRefHops {
		return true
	}
	return memoFact(f, f.null, s, depth, f.allowsNullOnce)
}

func (f *schemaFacts) allowsNullOnce(s *jsonschema.Schema, depth int) bool {
	s = f.p.deref(s)
	switch {
	case never(s):
		return false
	case len(schemaTypes(s)) > 0 && !slices.Contains(schemaTypes(s), "null"):
		return false
	case len(s.Enum) > 0 && !slices.Contains(s.Enum, nil):
		return false
	case s.Const != nil && *s.Const != nil:
		return false
	}
	some := func(list []*jsonschema.Schema) bool {
		return len(list) == 0 || slices.ContainsFunc(list, func(b *jsonschema.Schema) bool { return f.allowsNull(b, depth+1) })
	}
	if !some(s.AnyOf) || !some(s.OneOf) {
		return false
	}
	for _, b := range s.AllOf {
		if !f.allowsNull(b, depth+1) {
			return false
		}
	}
	return true
}

// matchesNothing reports whether s forbids its value whatever it is: false, a
// local $ref to false, an allOf branch that matches nothing, or anyOf or oneOf
// branches none of which matches anything. A null for an optional property
// whose schema matches nothing is refused (the property is not allowed), not
// taken as the property's absence. depth bounds the branches followed
// (maxRefHops).
func (f *schemaFacts) matchesNothing(s *jsonschema.Schema, depth int) bool {
	if s == nil || depth > maxRefHops {
		return false
	}
	return memoFact(f, f.nothing, s, depth, f.matchesNothingOnce)
}

func (f *schemaFacts) matchesNothingOnce(s *jsonschema.Schema, depth int) bool {
	if never(s) {
		return true
	}
	if s.Ref != "" {
		// The target alone: the keywords beside the $ref take nothing away.
		if t := f.p.deref(&jsonschema.Schema{Ref: s.Ref}); t.Ref == "" && f.matchesNothing(t, depth+1) {
			return true
		}
	}
	nothing := func(b *jsonschema.Schema) bool { return f.matchesNothing(b, depth+1) }
	something := func(b *jsonschema.Schema) bool { return !nothing(b) }
	return slices.ContainsFunc(s.AllOf, nothing) ||
		len(s.AnyOf) > 0 && !slices.ContainsFunc(s.AnyOf, something) ||
		len(s.OneOf) > 0 && !slices.ContainsFunc(s.OneOf, something)
}

// unionTypes returns the types a value of s may have, when s, its local $ref
// followed, has no type of its own and every branch of its anyOf or oneOf has
// types (followed the same way): ["string", "integer"] for {"anyOf":
// [{"type": "string"}, {"type": "integer"}]}. Nil otherwise: a type of its own,
// an enum or a const is said by the walker's own refusal. The slice returned is
// shared: not to be changed.
func (f *schemaFacts) unionTypes(s *jsonschema.Schema, depth int) []string {
	if s == nil || depth > maxRefHops {
		return nil
	}
	return memoFact(f, f.types, s, depth, f.unionTypesOnce)
}

func (f *schemaFacts) unionTypesOnce(s *jsonschema.Schema, depth int) []string {
	s = f.p.deref(s)
	if len(schemaTypes(s)) > 0 || len(s.Enum) > 0 || s.Const != nil {
		return nil
	}
	branches := s.AnyOf
	if len(branches) == 0 {
		branches = s.OneOf
	}
	var out []string
	for _, b := range branches {
		ts := schemaTypes(f.p.deref(b))
		if len(ts) == 0 {
			ts = f.unionTypes(b, depth+1)
		}
		if len(ts) == 0 {
			return nil
		}
		for _, t := range ts {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return out
}

// plain converts the numbers inside v, where no schema says more.
func (w *walker) plain(v any, path string, depth int) any {
	switch x := v.(type) {
	case json.Number:
		if n := w.number(x); n != nil {
			return n
		}
		w.fail(path, "%s %s", name(path), numberProblem(x))
	case map[string]any:
		// In key order: the problems found, and the first one's field, are the
		// same every time (a chain's refusal is a session's decision, replayed).
		for _, k := range slices.Sorted(maps.Keys(x)) {
			x[k] = w.plain(x[k], join(path, k), depth+1)
		}
	case []any:
		for i, e := range x {
			x[i] = w.plain(e, fmt.Sprintf("%s[%d]", path, i), depth+1)
		}
	}
	return v
}

func (w *walker) patternProperty(s *jsonschema.Schema, key string) bool {
	for pat := range s.PatternProperties {
		if re, err := regexp.Compile(pat); err == nil && re.MatchString(key) {
			return true
		}
	}
	return false
}

// never reports whether s is the schema that matches nothing (false, as in
// "additionalProperties": false).
func never(s *jsonschema.Schema) bool {
	if s == nil || s.Not == nil {
		return false
	}
	b, err := json.Marshal(s)
	return err == nil && string(b) == "false"
}

func propertyNames(s *jsonschema.Schema) []string {
	names := slices.Clone(s.PropertyOrder)
	for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
		if !slices.Contains(names, k) {
			names = append(names, k)
		}
	}
	return names
}

func schemaTypes(s *jsonschema.Schema) []string {
	switch {
	case s == nil:
		return nil
	case s.Type != "":
		return []string{s.Type}
	}
	return s.Types
}

// number reads a JSON number as int64 when it is an integer that fits, else as
// float64; nil when it overflows float64, or when it is an integer written without
// a fraction or an exponent that float64 does not hold as written
// (10000000000000000001 would reach the tool as 10000000000000000000).
func number(n json.Number) any {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) || inexactInteger(n, f) {
		return nil
	}
	return f
}

// roundedNumber is number but for an integer float64 does not hold as written,
// which it reads as the float64 nearest it (ArgumentsRounded).
func roundedNumber(n json.Number) any {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) {
		return nil
	}
	return f
}

// inexactInteger reports whether n, read as f, is an integer written without a
// fraction or an exponent that f does not write back as it was written.
func inexactInteger(n json.Number, f float64) bool {
	if strings.ContainsAny(string(n), ".eE") {
		return false
	}
	// f's shortest digits in full, not json.Marshal's text, which writes 1e21 and
	// above in exponent form: 1000000000000000000000 is written back as written.
	// An integer float64 holds whose shortest digits differ (9223372036854775808,
	// written 9223372036854776000) is still refused: read back as an integer, the
	// text passed on would be another one.
	return strconv.FormatFloat(f, 'f', -1, 64) != string(n)
}

// numberProblem says why number(n) is nil.
func numberProblem(n json.Number) string {
	if f, err := strconv.ParseFloat(string(n), 64); err == nil && !math.IsInf(f, 0) {
		return fmt.Sprintf("is the integer %s, which cannot be passed on exactly (integers from %d to %d can; one in exponent form, 1.5e19, is taken rounded)", clipNumber(n), math.MinInt64, math.MaxInt64)
	}
	return "is a number too large to represent"
}

func clipNumber(n json.Number) string {
	if len(n) > 40 {
		return string(n[:37]) + "…"
	}
	return string(n)
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case float64:
		return x
	}
	return math.NaN()
}

// typeOf names v's JSON Schema type; a float64 without a fraction is an integer.
func typeOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case int64:
		return "integer"
	case float64:
		if x == math.Trunc(x) {
			return "integer"
		}
		return "number"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}

func typeIn(v any, types []string) bool {
	t := typeOf(v)
	return slices.Contains(types, t) || (t == "integer" && slices.Contains(types, "number"))
}

var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// coerce converts v to the type want when the rules of ArgumentParser allow.
// maxDepth bounds the nesting of JSON read from a string.
func coerce(v any, want string, maxDepth int, number func(json.Number) any) (any, bool) {
	switch x := v.(type) {
	case string:
		t := strings.TrimSpace(x)
		switch want {
		case "integer", "number":
			if !jsonNumber.MatchString(t) {
				return nil, false
			}
			n := number(json.Number(t))
			if n == nil || (want == "integer" && typeOf(n) != "integer") {
				return nil, false
			}
			return n, true
		case "boolean":
			switch strings.ToLower(t) {
			case "true":
				return true, true
			case "false":
				return false, true
			}
		case "array", "object":
			if (want == "array" && strings.HasPrefix(t, "[")) || (want == "object" && strings.HasPrefix(t, "{")) {
				if maxDepth < 1 {
					return nil, false
				}
				if j, err := decodeJSON(t, maxDepth); err == nil {
					return j, true
				}
			}
		}
	case int64, float64:
		if want == "string" {
			return jsonText(x), true
		}
	case bool:
		if want == "string" {
			return strconv.FormatBool(x), true
		}
	}
	return nil, false
}

// sameJSON reports whether two JSON values are equal, numbers by value.
func sameJSON(a, b any) bool {
	fa, aok := numeric(a)
	fb, bok := numeric(b)
	if aok || bok {
		return aok && bok && fa == fb
	}
	return reflect.DeepEqual(a, b)
}

func numeric(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case int:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

// jsonText writes v as compact JSON, clipped for an error message.
func jsonText(v any) string {
	var s string
	switch x := v.(type) {
	case float64:
		s = FormatNumber(x)
	default:
		b, err := marshalCompact(v)
		if err != nil {
			return fmt.Sprint(v)
		}
		s = string(b)
	}
	if len(s) > 60 {
		return s[:57] + "…"
	}
	return s
}

// describe names v's type and, for a scalar, its value: `the string "abc"`.
func describe(v any) string {
	switch typeOf(v) {
	case "null":
		return "null"
	case "boolean":
		return jsonText(v)
	case "string":
		return "the string " + jsonText(v)
	case "integer", "number":
		return "the number " + jsonText(v)
	case "object":
		return "an object"
	case "array":
		return "an array"
	}
	return typeOf(v)
}

func wantTypes(types []string) string {
	out := make([]string, 0, len(types))
	for _, t := range types {
		switch t {
		case "integer":
			out = append(out, "an integer")
		case "number":
			out = append(out, "a number")
		case "string":
			out = append(out, "a string")
		case "boolean":
			out = append(out, "true or false")
		case "object":
			out = append(out, "an object")
		case "array":
			out = append(out, "an array")
		default:
			out = append(out, t)
		}
	}
	return strings.Join(out, " or ")
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// name quotes a field path for a message; the whole arguments have none.
func name(path string) string {
	if path == "" {
		return "the arguments"
	}
	return strconv.Quote(path)
}

// validatorProblem rephrases an error of jsonschema-go's validator: the schema path
// it names ("/properties/items/items/properties/name") becomes a field path
// ("items[].name").
func validatorProblem(err error) string { return validatorText(err.Error()) }

// validatorText is validatorProblem of the validator's error text.
func validatorText(msg string) string {
	const marker = "validating /"
	path := ""
	for {
		i := strings.Index(msg, marker)
		if i < 0 {
			break
		}
		rest := msg[i+len("validating "):]
		p, after, ok := strings.Cut(rest, ": ")
		if !ok {
			break
		}
		path, msg = p, after
	}
	msg = clipQuoted(strings.TrimPrefix(msg, "validating root: "))
	if path == "" {
		return "the arguments do not match the schema: " + msg
	}
	field := strings.NewReplacer("/properties/", ".", "/items", "[]").Replace(path)
	return fmt.Sprintf("%s does not match the schema: %s", strconv.Quote(strings.TrimPrefix(field, ".")), msg)
}

// underProperty returns text, the validator's error for the value of the property
// k checked on its own, without its leading "validating root: ", as the validator
// of the schema holding k says it: the paths of the schemas that failed, which
// lead the text, start at the property's.
func underProperty(k, text string) string {
	const marker = "validating /"
	var b strings.Builder
	b.WriteString("validating /properties/" + k + ": ")
	for strings.HasPrefix(text, marker) {
		path, after, ok := strings.Cut(text[len("validating "):], ": ")
		if !ok {
			break
		}
		b.WriteString("validating /properties/" + k + path + ": ")
		text = after
	}
	b.WriteString(text)
	return b.String()
}

// maxQuoted bounds a quoted value in a validator's message (clipQuoted).
const maxQuoted = 80

// clipQuoted shortens each quoted string of a message longer than maxQuoted bytes
// to its head and its length: a message quotes the model's value or field name
// whole, and one of half a megabyte filled the error and cut off what was
// expected.
func clipQuoted(msg string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(msg, '"')
		if i < 0 {
			break
		}
		j := i + 1
		for j < len(msg) && msg[j] != '"' {
			if msg[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(msg) {
			break
		}
		lit := msg[i : j+1]
		b.WriteString(msg[:i])
		if s, err := strconv.Unquote(lit); err == nil && len(lit) > maxQuoted && len(s) > maxQuoted/2 {
			cut := maxQuoted / 2
			for cut > 0 && !utf8.RuneStart(s[cut]) {
				cut--
			}
			lit = fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:cut]), len(s))
		}
		b.WriteString(lit)
		msg = msg[j+1:]
	}
	b.WriteString(msg)
	return b.String()
}

// marshalCompact writes v as compact JSON without HTML escaping.
func marshalCompact(v any) ([]byte, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return []byte(strings.TrimSuffix(b.String(), "\n")), nil
}

// ParsePairs reads key=value pairs, the argument form of the text protocol (see
// ArgumentParser for the grammar). Each value is a string; a key given twice is an
// error.
func ParsePairs(s string) (map[string]string, error) {
	out, _, err := parsePairs(s)
	return out, err
}

// parsePairs is ParsePairs, also returning, by key, the text of each value
// written in double quotes, quotes included (its escapes are JSON's).
func parsePairs(s string) (map[string]string, map[string]string, error) {
	out := map[string]string{}
	dq := map[string]string{}
	i := 0
	skip := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r') {
			i++
		}
	}
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n') {
			i++
		}
		if i >= len(s) {
			break
		}
		start := i
		if !(isLetter(s[i])) {
			return nil, nil, fmt.Errorf("at byte %d: want a key (a name such as query) followed by '='", i+1)
		}
		for i < len(s) && (isLetter(s[i]) || isDigit(s[i]) || s[i] == '-') {
			i++
		}
		key := s[start:i]
		skip()
		if i >= len(s) || (s[i] != '=' && s[i] != ':') {
			return nil, nil, fmt.Errorf("at byte %d: want '=' after the key %q", i+1, key)
		}
		i++
		skip()
		var val string
		if i < len(s) && (s[i] == '"' || s[i] == '\'') {
			v, n, err := quoted(s[i:])
			if err != nil {
				return nil, nil, fmt.Errorf("the value of %q: %w", key, err)
			}
			if s[i] == '"' {
				dq[key] = s[i : i+n]
			}
			val, i = v, i+n
			skip()
			if i < len(s) && s[i] != ',' && s[i] != '\n' {
				return nil, nil, fmt.Errorf("at byte %d: want ',' after the quoted value of %q", i+1, key)
			}
		} else {
			n, err := bare(s[i:])
			if err != nil {
				return nil, nil, fmt.Errorf("the value of %q: %w", key, err)
			}
			val, i = strings.TrimSpace(s[i:i+n]), i+n
		}
		if _, dup := out[key]; dup {
			return nil, nil, fmt.Errorf("the key %q is given twice", key)
		}
		out[key] = strings.ToValidUTF8(val, "\uFFFD") // as encoding/json reads JSON strings
		if i < len(s) {
			i++ // the separator
		}
	}
	if len(out) == 0 {
		return nil, nil, errors.New("no key=value pair")
	}
	return out, dq, nil
}

// quoted reads a quoted string at the start of s and returns its value and the
// bytes it took. Double quotes take JSON's escapes; single quotes \' and \\.
func quoted(s string) (string, int, error) {
	q := s[0]
	if q == '"' {
		dec := json.NewDecoder(strings.NewReader(s))
		var v string
		if err := dec.Decode(&v); err != nil {
			return "", 0, fmt.Errorf("an unterminated or malformed double-quoted string: %v", strings.TrimPrefix(err.Error(), "json: "))
		}
		return v, int(dec.InputOffset()), nil
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s) && (s[i+1] == '\'' || s[i+1] == '\\'):
			b.WriteByte(s[i+1])
			i++
		case c == '\'':
			return b.String(), i + 1, nil
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, errors.New("a single-quoted string that does not end")
}

// bare returns the length of an unquoted value at the start of s: up to the next
// comma or line break outside brackets and quotes.
func bare(s string) (int, error) {
	var stack []byte
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			_, n, err := quoted(s[i:])
			if err != nil {
				return 0, err
			}
			i += n - 1
		case '[', '{', '(':
			stack = append(stack, c)
		case ']', '}', ')':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case ',', '\n':
			if len(stack) == 0 {
				return i, nil
			}
		}
		if len(stack) > MaxArgumentDepth {
			return 0, errTooDeep{MaxArgumentDepth}
		}
	}
	return len(s), nil
}
