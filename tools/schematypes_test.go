package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
)

// A schema naming a type JSON Schema does not have ("int" for "integer", a typo)
// is refused when the tool or chain is made, naming the field and the type: taken,
// it would refuse every value ("n" must be int, not the number 21), and the model
// could never call the tool.
func TestSchemaWithAnUnknownTypeIsRefusedWhenMade(t *testing.T) {
	for _, c := range []struct{ schema, where, typ string }{
		{`{"type":"object","properties":{"n":{"type":"int"}}}`, `"n"`, `"int"`},
		{`{"type":"object","properties":{"n":{"type":["integr","null"]}}}`, `"n"`, `"integr"`},
		{`{"type":"object","properties":{"tags":{"type":"array","items":{"type":"str"}}}}`, `"tags[]"`, `"str"`},
		{`{"type":"object","$defs":{"d":{"type":"float"}},"properties":{"x":{"$ref":"#/$defs/d"}}}`, `d`, `"float"`},
	} {
		_, err := tools.NewArgumentParser("t", json.RawMessage(c.schema), 0)
		if err == nil || !strings.Contains(err.Error(), c.where) || !strings.Contains(err.Error(), c.typ) {
			t.Errorf("NewArgumentParser(%s): %v, want an error naming %s and %s", c.schema, err, c.where, c.typ)
		}
		_, err = tools.Func("t", "d", func(context.Context, map[string]any) (string, error) { return "", nil }, tools.WithSchema(json.RawMessage(c.schema)))
		if err == nil || !strings.Contains(err.Error(), c.typ) {
			t.Errorf("Func WithSchema(%s): %v, want an error naming %s", c.schema, err, c.typ)
		}
		ch := tools.Chain{Name: "c", Description: "d", InputSchema: json.RawMessage(c.schema),
			Steps: []tools.ChainStep{{Name: "s", Tool: "calculator", Args: `{"expression": "1"}`}}}
		if err := ch.Validate(); !errors.Is(err, tools.ErrBadChain) || !strings.Contains(err.Error(), c.typ) {
			t.Errorf("chain with input_schema %s: %v, want an error naming %s", c.schema, err, c.typ)
		}
	}
	// Every type JSON Schema has is taken, alone or in a list.
	ok := `{"type":"object","properties":{"a":{"type":"array"},"b":{"type":"boolean"},"i":{"type":"integer"},` +
		`"z":{"type":"null"},"n":{"type":"number"},"o":{"type":"object","properties":{"type":{"type":"string"}}},` +
		`"s":{"type":["string","null"]},"e":{"enum":[{"type":"whatever"}]}}}`
	if _, err := tools.NewArgumentParser("t", json.RawMessage(ok), 0); err != nil {
		t.Fatal(err)
	}
}
