package tools_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
)

// A schema whose nested types are $refs to its $defs (as Pydantic, and so Python
// MCP servers, write them) is coerced and checked through the refs as if they were
// written in place: "2" for an integer of an item is 2, and a missing field is
// named by its place in the arguments, not by the schema's path.
func TestArgumentsAreCoercedThroughRefs(t *testing.T) {
	schema := `{"$defs":{"Item":{"properties":{"name":{"type":"string"},"qty":{"type":"integer"},"tags":{"$ref":"#/$defs/Tags"}},"required":["name"],"type":"object"},
"Tags":{"items":{"type":"string"},"type":"array"}},
"properties":{"items":{"items":{"$ref":"#/$defs/Item"},"type":"array"},"first":{"$ref":"#/$defs/Item"}},"required":["items"],"type":"object"}`
	p, err := tools.NewArgumentParser("order", json.RawMessage(schema), 0)
	if err != nil {
		t.Fatal(err)
	}
	for args, want := range map[string]string{
		`{"items":[{"name":"a","qty":"2"}]}`:                       `{"items":[{"name":"a","qty":2}]}`,
		`items=[{"name": "a", "qty": "3", "tags": "[\"x\"]"}]`:     `{"items":[{"name":"a","qty":3,"tags":["x"]}]}`,
		`{"items":[],"first":{"name":"b","qty":"4","tags":["y"]}}`: `{"first":{"name":"b","qty":4,"tags":["y"]},"items":[]}`,
	} {
		if out, err := p.ParseJSON(args); err != nil || string(out) != want {
			t.Errorf("%s = %s, %v; want %s", args, out, err, want)
		}
	}
	_, err = p.ParseJSON(`{"items":[{"qty":2}]}`)
	if !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), `missing the required field "items[0].name"`) {
		t.Errorf("a missing name: %v", err)
	}
}

// A schema whose $refs lead back to where they are without a value between is
// refused when the parser is made, naming the ref: the validator would follow them
// until the stack overflows, which ends the process (no recover catches it). A
// schema that refers to itself through a value, a tree, is read as before.
func TestSchemaWhoseRefsGoRoundIsRefused(t *testing.T) {
	for _, schema := range []string{
		`{"$defs":{"A":{"$ref":"#/$defs/B"},"B":{"$ref":"#/$defs/A"}},"properties":{"x":{"$ref":"#/$defs/A"}},"type":"object"}`,
		`{"$defs":{"A":{"allOf":[{"$ref":"#/$defs/B"}]},"B":{"anyOf":[{"type":"string"},{"$ref":"#/$defs/A"}]}},"properties":{"x":{"$ref":"#/$defs/A"}},"type":"object"}`,
		`{"type":"object","not":{"$ref":"#"}}`,
	} {
		p, err := tools.NewArgumentParser("loop", json.RawMessage(schema), 0)
		if err == nil {
			_, err = p.ParseJSON(`{"x":1}`)
			t.Errorf("%s: the parser was made (its call: %v)", schema, err)
		} else if !strings.Contains(err.Error(), "leads back to itself without a value between") {
			t.Errorf("%s: %v", schema, err)
		}
	}
	tree := `{"$defs":{"Node":{"properties":{"name":{"type":"string"},"children":{"items":{"$ref":"#/$defs/Node"},"type":"array"}},"required":["name"],"type":"object"}},"$ref":"#/$defs/Node"}`
	p, err := tools.NewArgumentParser("tree", json.RawMessage(tree), 0)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := p.ParseJSON(`{"name":"a","children":[{"name":"b","children":[{"name":"c"}]}]}`); err != nil || string(out) != `{"children":[{"children":[{"name":"c"}],"name":"b"}],"name":"a"}` {
		t.Errorf("tree: %s, %v", out, err)
	}
	if _, err := p.ParseJSON(`{"name":"a","children":[{"children":[]}]}`); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Errorf("a tree without a name: %v", err)
	}
}

// The values of default, examples, const and enum are values, not schemas: one that
// is an object holding "$ref" (a JSON Reference the tool takes as data) is no $ref
// of the schema, and a parser is made for it; a loop among the schema's own refs
// is still refused.
func TestRefLoopCheckReadsOnlySchemas(t *testing.T) {
	for _, schema := range []string{
		`{"type":"object","properties":{"doc":{"type":"object","default":{"$ref":"#/properties/doc/default"}}}}`,
		`{"type":"object","properties":{"doc":{"type":"object","examples":[{"allOf":[{"$ref":"#/properties/doc/examples/0"}]}]}}}`,
		`{"type":"object","properties":{"doc":{"const":{"not":{"$ref":"#/properties/doc/const"}}}}}`,
		`{"type":"object","properties":{"doc":{"enum":[{"$ref":"#/properties/doc/enum/0"}]}}}`,
	} {
		p, err := tools.NewArgumentParser("docs", json.RawMessage(schema), 0)
		if err != nil {
			t.Errorf("%s: %v", schema, err)
			continue
		}
		if _, err := p.ParseJSON(`{}`); err != nil {
			t.Errorf("%s: {}: %v", schema, err)
		}
	}
	loop := `{"type":"object","properties":{"doc":{"default":{"$ref":"#"},"allOf":[{"$ref":"#/properties/doc"}]}}}`
	if _, err := tools.NewArgumentParser("docs", json.RawMessage(loop), 0); err == nil || !strings.Contains(err.Error(), "leads back to itself") {
		t.Errorf("a loop beside a default holding $ref: %v", err)
	}
}
