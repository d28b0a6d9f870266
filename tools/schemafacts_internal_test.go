package tools

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

// nestedSchema is a tool's schema whose property "p" is the top of levels levels
// of $defs, each of two branches that both refer to the level below (kw: anyOf,
// oneOf or allOf), the lowest a string ({"type": leaf}): the schema the parser
// takes (its applications stay under maxSchemaApplications up to 14 levels) on
// which a walk that follows each branch anew does 2^levels times the work.
func nestedSchema(kw string, levels int, leaf string) string {
	defs := []string{fmt.Sprintf(`"L0": {"type": %q}`, leaf)}
	for i := 1; i <= levels; i++ {
		defs = append(defs, fmt.Sprintf(`"L%d": {%q: [{"$ref": "#/$defs/L%d"}, {"$ref": "#/$defs/L%d"}]}`, i, kw, i-1, i-1))
	}
	return fmt.Sprintf(`{"type": "object", "properties": {"p": {"$ref": "#/$defs/L%d"}}, "required": ["p"], "$defs": {%s}}`, levels, strings.Join(defs, ", "))
}

// The facts of a null property's schema (allowsNull, matchesNothing,
// unionTypes) take work in proportion to the schema's size, not to the number of
// paths through it: on levels of anyOf, oneOf and allOf branches that share a
// $ref, the schemas they look at grow by a few per level, where following each
// branch anew looked at 2^levels of them (the reference below, the walk as it
// was). Their answers are the reference's. Work is counted, not timed.
func TestSchemaFactsWorkIsLinearInNesting(t *testing.T) {
	const levels = 14
	for _, kw := range []string{"anyOf", "oneOf", "allOf"} {
		for _, leaf := range []string{"string", "null"} {
			var steps []int
			for n := 1; n <= levels; n++ {
				p, err := NewArgumentParser("t", json.RawMessage(nestedSchema(kw, n, leaf)), 0)
				if err != nil {
					t.Fatalf("%s, %d levels: %v", kw, n, err)
				}
				ps := p.schema.Properties["p"]
				f := newSchemaFacts(p)
				ref := &referenceFacts{p: p}
				null, nothing, types := f.allowsNull(ps, 0), f.matchesNothing(ps, 0), f.unionTypes(ps, 0)
				rNull, rNothing, rTypes := ref.allowsNull(ps, 0), ref.matchesNothing(ps, 0), ref.unionTypes(ps, 0)
				if null != rNull || nothing != rNothing || !slices.Equal(types, rTypes) {
					t.Errorf("%s of %s, %d levels: allowsNull %t, matchesNothing %t, unionTypes %v; the reference says %t, %t, %v",
						kw, leaf, n, null, nothing, types, rNull, rNothing, rTypes)
				}
				steps = append(steps, f.steps)
				if n == levels {
					t.Logf("%s of %s, %d levels: %d schemas looked at, %d by the reference", kw, leaf, n, f.steps, ref.steps)
				}
			}
			// Linear: the same few more at each level (the level's two branches, in
			// each of the three facts), none of the doubling.
			for n := 2; n < levels; n++ {
				if d, first := steps[n]-steps[n-1], steps[1]-steps[0]; d != first || d > 9 {
					t.Errorf("%s of %s: %v schemas looked at for 1 to %d levels; want the same few more at each level", kw, leaf, steps, levels)
					break
				}
			}
		}
	}
}

// The walker's answer for a null where a union of levels of branches wants a
// type is the reference's: the union's types said.
func TestNullForANestedUnionSaysItsTypes(t *testing.T) {
	p, err := NewArgumentParser("t", json.RawMessage(nestedSchema("anyOf", 14, "string")), 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Parse(`{"p": null}`)
	if err == nil || !strings.Contains(err.Error(), `"p" must be a string, not null`) {
		t.Errorf("a null for the nested union: %v", err)
	}
}

// referenceFacts is schemaFacts without its memory: each branch followed anew,
// as the walker did. It counts the schemas it looks at.
type referenceFacts struct {
	p     *ArgumentParser
	steps int
}

func (f *referenceFacts) allowsNull(s *jsonschema.Schema, depth int) bool {
	if s == nil || depth > maxRefHops {
		return true
	}
	f.steps++
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

func (f *referenceFacts) matchesNothing(s *jsonschema.Schema, depth int) bool {
	if s == nil || depth > maxRefHops {
		return false
	}
	f.steps++
	if never(s) {
		return true
	}
	if s.Ref != "" {
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

func (f *referenceFacts) unionTypes(s *jsonschema.Schema, depth int) []string {
	if s == nil || depth > maxRefHops {
		return nil
	}
	f.steps++
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

// On schemas of every shape the facts look at (types, enums, consts, false,
// $refs with keywords beside them, branches of each kind, a $ref that comes back
// to its schema), the facts are the reference's.
func TestSchemaFactsAnswerAsTheReference(t *testing.T) {
	props := []string{
		`{"type": "string"}`,
		`{"type": ["string", "null"]}`,
		`{"enum": ["a", null]}`,
		`{"enum": ["a"]}`,
		`{"const": null}`,
		`{"const": 1}`,
		`false`,
		`true`,
		`{}`,
		`{"$ref": "#/$defs/F"}`,
		`{"$ref": "#/$defs/S", "description": "beside"}`,
		`{"$ref": "#/$defs/N", "type": "string"}`,
		`{"anyOf": [{"type": "string"}, {"type": "integer"}]}`,
		`{"anyOf": [{"type": "string"}, {"$ref": "#/$defs/N"}]}`,
		`{"oneOf": [{"$ref": "#/$defs/S"}, {"anyOf": [{"type": "boolean"}, {"type": "number"}]}]}`,
		`{"anyOf": [{"$ref": "#/$defs/F"}, false]}`,
		`{"allOf": [{"type": "string"}, {"$ref": "#/$defs/F"}]}`,
		`{"allOf": [{"$ref": "#/$defs/N"}, {"anyOf": [{"type": "null"}, {"type": "string"}]}]}`,
		`{"anyOf": [{}, {"type": "string"}]}`,
		`{"oneOf": [{"enum": [1, 2]}, {"const": "x"}]}`,
		`{"$ref": "#/$defs/R"}`,
		`{"$ref": "#/$defs/AB"}`,
	}
	defs := `"F": false, "S": {"type": "string"}, "N": {"type": "null"},
		"R": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#/$defs/R"}}]},
		"AB": {"anyOf": [{"$ref": "#/$defs/S"}, {"allOf": [{"$ref": "#/$defs/N"}, {"$ref": "#/$defs/AB2"}]}]},
		"AB2": {"oneOf": [{"$ref": "#/$defs/N"}, {"$ref": "#/$defs/S"}]}`
	for _, prop := range props {
		p, err := NewArgumentParser("t", json.RawMessage(`{"type": "object", "properties": {"p": `+prop+`}, "$defs": {`+defs+`}}`), 0)
		if err != nil {
			t.Fatalf("%s: %v", prop, err)
		}
		ps := p.schema.Properties["p"]
		f, ref := newSchemaFacts(p), &referenceFacts{p: p}
		if a, b := f.allowsNull(ps, 0), ref.allowsNull(ps, 0); a != b {
			t.Errorf("%s: allowsNull %t, the reference %t", prop, a, b)
		}
		if a, b := f.matchesNothing(ps, 0), ref.matchesNothing(ps, 0); a != b {
			t.Errorf("%s: matchesNothing %t, the reference %t", prop, a, b)
		}
		if a, b := f.unionTypes(ps, 0), ref.unionTypes(ps, 0); !slices.Equal(a, b) {
			t.Errorf("%s: unionTypes %v, the reference %v", prop, a, b)
		}
	}
}
