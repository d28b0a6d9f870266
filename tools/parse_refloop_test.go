package tools_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
)

// A loop of references is refused when the parser is made however its refs name
// their targets, as jsonschema-go's validator resolves them: through draft-07's
// dependencies, an $anchor, a draft-07 "$id": "#a", a $dynamicAnchor, a URI
// qualified by the root's $id (absolute or relative), a percent-encoded JSON
// Pointer, or a "#/…" pointer read in a nested resource of its own. Each was
// once made, and the first call whose arguments reached the loop ended the
// process (fatal error: stack overflow): the test binary would not survive a
// parser made for one of them and called.
func TestSchemaWhoseRefsGoRoundByAnyNameIsRefused(t *testing.T) {
	const draft7 = `"$schema":"http://json-schema.org/draft-07/schema#",`
	for name, schema := range map[string]string{
		"dependencies":                       `{` + draft7 + `"definitions":{"A":{"dependencies":{"x":{"$ref":"#/definitions/A"}}}},"allOf":[{"$ref":"#/definitions/A"}]}`,
		"$anchor":                            `{"type":"object","$defs":{"A":{"$anchor":"a","allOf":[{"$ref":"#a"}]}},"properties":{"x":{"$ref":"#/$defs/A"}}}`,
		"draft-07 $id":                       `{` + draft7 + `"type":"object","definitions":{"A":{"$id":"#a","allOf":[{"$ref":"#a"}]}},"properties":{"x":{"$ref":"#/definitions/A"}}}`,
		"$dynamicRef":                        `{"type":"object","$defs":{"A":{"$dynamicAnchor":"n","allOf":[{"$dynamicRef":"#n"}]}},"properties":{"x":{"$ref":"#/$defs/A"}}}`,
		"absolute URI":                       `{"$id":"http://e.x/s","type":"object","$defs":{"A":{"allOf":[{"$ref":"http://e.x/s#/$defs/A"}]}},"properties":{"x":{"$ref":"#/$defs/A"}}}`,
		"relative URI":                       `{"$id":"http://e.x/s","type":"object","$defs":{"A":{"allOf":[{"$ref":"s#/$defs/A"}]}},"properties":{"x":{"$ref":"#/$defs/A"}}}`,
		"percent":                            `{"type":"object","$defs":{"a b":{"allOf":[{"$ref":"#/$defs/a%20b"}]}},"properties":{"x":{"$ref":"#/$defs/a%20b"}}}`,
		"nested $id":                         `{"type":"object","$defs":{"B":{"type":"string"},"R":{"$id":"http://e.x/r","$defs":{"B":{"allOf":[{"$ref":"#/$defs/B"}]}},"allOf":[{"$ref":"#/$defs/B"}]}},"properties":{"x":{"$ref":"#/$defs/R"}}}`,
		"dependentSchemas through an anchor": `{"type":"object","$defs":{"A":{"$anchor":"a","dependentSchemas":{"x":{"$ref":"#a"}}}},"$ref":"#a"}`,
	} {
		if _, err := tools.NewArgumentParser("loop", json.RawMessage(schema), 0); err == nil {
			t.Errorf("%s: the parser was made for %s", name, schema)
		} else if !strings.Contains(err.Error(), "leads back to itself without a value between") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Anchors, $ids, percent-encoded pointers and dependencies that lead to no loop
// (or to one through a value, which the arguments' depth bounds) are read as
// before.
func TestSchemaWhoseRefsNameTargetsOtherwiseIsRead(t *testing.T) {
	const draft7 = `"$schema":"http://json-schema.org/draft-07/schema#",`
	for _, c := range []struct{ schema, args, want string }{
		{`{"$defs":{"Node":{"$anchor":"node","type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#node"}}}}},"$ref":"#node"}`,
			`{"name":"a","children":[{"name":"b","children":[{"name":"c"}]}]}`, `{"children":[{"children":[{"name":"c"}],"name":"b"}],"name":"a"}`},
		{`{"$id":"http://e.x/s","type":"object","$defs":{"N":{"type":"object","properties":{"next":{"$ref":"s#/$defs/N"}}}},"properties":{"x":{"$ref":"http://e.x/s#/$defs/N"}}}`,
			`{"x":{"next":{"next":{}}}}`, `{"x":{"next":{"next":{}}}}`},
		{`{"type":"object","$defs":{"a b":{"type":"integer"}},"properties":{"x":{"$ref":"#/$defs/a%20b"}}}`, `{"x":1}`, `{"x":1}`},
		{`{` + draft7 + `"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}},"dependencies":{"x":{"required":["y"]},"y":["x"]}}`,
			`{"x":1,"y":2}`, `{"x":1,"y":2}`},
	} {
		p, err := tools.NewArgumentParser("t", json.RawMessage(c.schema), 0)
		if err != nil {
			t.Errorf("%s: %v", c.schema, err)
			continue
		}
		if out, err := p.ParseJSON(c.args); err != nil || string(out) != c.want {
			t.Errorf("%s: %s = %s, %v; want %s", c.schema, c.args, out, err, c.want)
		}
	}
	p, err := tools.NewArgumentParser("t", json.RawMessage(`{`+draft7+`"type":"object","properties":{"x":{"type":"integer"}},"dependencies":{"x":{"required":["y"]}}}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.ParseJSON(`{"x":1}`); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Errorf("x without y: %v", err)
	}
}
