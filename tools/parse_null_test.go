package tools_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
)

// A null for a property whose schema does not allow null, but says so only
// through anyOf, oneOf or a $ref (as Pydantic and zod write unions and nested
// types), is read as for a property of a plain type: refused naming the field
// and what it wants when the property is required (the validator's refusal said
// "id/anyOf/1" ... "<invalid reflect.Value>", and named no field), the property's
// absence when it is optional (it was refused). A property whose schema allows
// null keeps it. Under ArgumentsExactNullsByType, the rules a chain's arguments
// were recorded under, they are read as before.
func TestNullForAPropertyWhoseSchemaRefusesIt(t *testing.T) {
	schema := `{"type":"object","$defs":{"S":{"type":"string"}},"properties":{
"id":{"anyOf":[{"type":"string"},{"type":"integer"}]},
"note":{"anyOf":[{"type":"string"}]},
"item":{"$ref":"#/$defs/S"},
"kind":{"oneOf":[{"$ref":"#/$defs/S"},{"type":"boolean"}]},
"maybe":{"anyOf":[{"type":"string"},{"type":"null"}]},
"gone":false},
"required":["id"]}`
	p, err := tools.NewArgumentParser("lookup", json.RawMessage(schema), 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.ParseJSON(`{"id":null}`)
	var ae *tools.ArgumentError
	if !errors.As(err, &ae) || ae.Field != "id" || !strings.Contains(ae.Reason, `"id" must be a string or an integer, not null`) {
		t.Errorf("a null id: %v (field %q)", err, fieldOf(ae))
	}
	if _, err := p.Check(`{"id":null}`); !errors.As(err, &ae) || ae.Field != "id" {
		t.Errorf("a null id, checked: %v", err)
	}
	args := `{"id":7,"note":null,"item":null,"kind":null,"maybe":null}`
	if out, err := p.ParseJSON(args); err != nil || string(out) != `{"id":7,"maybe":null}` {
		t.Errorf("optional nulls: %s, %v; want those the schema refuses absent", out, err)
	}
	if out, err := p.Check(args); err != nil || string(out) != `{"id":7,"item":null,"kind":null,"maybe":null,"note":null}` {
		t.Errorf("optional nulls, checked: %s, %v; want them passed on as written", out, err)
	}
	if _, err := p.ParseJSON(`{"id":7,"gone":null}`); err == nil || !strings.Contains(err.Error(), `"gone" is not allowed`) {
		t.Errorf("a null for a property the schema forbids: %v; want it refused", err)
	}
	legacy := p.WithRules(tools.ArgumentsExactNullsByType)
	if _, err := legacy.ParseJSON(`{"id":7,"item":null}`); err == nil {
		t.Error("under ArgumentsExactNullsByType, a null for an optional $ref was taken; it was refused")
	}
	if _, err := legacy.ParseJSON(`{"id":null}`); err == nil || !strings.Contains(err.Error(), "/anyOf/") {
		t.Errorf("under ArgumentsExactNullsByType, a null id: %v; want the validator's refusal, as before", err)
	}
}

func fieldOf(ae *tools.ArgumentError) string {
	if ae == nil {
		return ""
	}
	return ae.Field
}

// A null for a property the schema forbids is refused however the ban is
// written: through a $ref to false, allOf, anyOf or a $ref with keywords beside
// it, as for "gone": false. It was taken as the property's absence (Check
// passed it on to the tool) since nulls were read against the property's whole
// schema.
func TestNullForAForbiddenPropertyIsRefused(t *testing.T) {
	schema := `{"type":"object","$defs":{"No":false},"properties":{"a":{"type":"string"},
"gone":{"$ref":"#/$defs/No"},
"banned":{"allOf":[false]},
"none":{"anyOf":[false,{"$ref":"#/$defs/No"}]},
"retired":{"$ref":"#/$defs/No","description":"no longer read"}}}`
	p, err := tools.NewArgumentParser("lookup", json.RawMessage(schema), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"gone", "banned", "none", "retired"} {
		args := `{"a":"x","` + k + `":null}`
		if out, err := p.ParseJSON(args); !errors.Is(err, tools.ErrInvalidArguments) {
			t.Errorf("%s = %s, %v; want it refused", args, out, err)
		}
		if out, err := p.Check(args); !errors.Is(err, tools.ErrInvalidArguments) {
			t.Errorf("%s, checked = %s, %v; want it refused", args, out, err)
		}
	}
	if _, err := p.ParseJSON(`{"a":"x","gone":null}`); err == nil || !strings.Contains(err.Error(), `"gone" is not allowed`) {
		t.Errorf("a null for gone: %v; want it refused as not allowed", err)
	}
	if out, err := p.ParseJSON(`{"a":"x"}`); err != nil || string(out) != `{"a":"x"}` {
		t.Errorf("without the forbidden properties: %s, %v", out, err)
	}
}
