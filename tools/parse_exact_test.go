package tools_test

import (
	"encoding/json"
	"testing"

	"github.com/troupe-run/troupe/tools"
)

// An integer of 1e21 and above whose digits float64 writes back as written
// passes, though encoding/json writes such a float64 in exponent form; one whose
// shortest digits differ is still refused.
func TestArgumentLargeExactIntegersPass(t *testing.T) {
	p, err := tools.NewArgumentParser("raw", json.RawMessage(`{"type":"object","properties":{"x":{"type":"number"}}}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range []string{`{"x":1000000000000000000000}`, `{"x":-10000000000000000000000}`} {
		m, err := p.Parse(args)
		if err != nil {
			t.Errorf("%s: %v", args, err)
			continue
		}
		var want struct{ X float64 }
		if json.Unmarshal([]byte(args), &want) != nil || m["x"] != want.X {
			t.Errorf("%s: x = %v, want %v", args, m["x"], want.X)
		}
	}
	if _, err := p.Parse(`{"x":1180591620717411303424}`); err == nil {
		t.Error("2^70 (1180591620717411303424) passed; it would be passed on as 1180591620717411300000")
	}
}

// A $ref's sibling keywords keep their coercion: the value is coerced as the
// target and the siblings say together.
func TestArgumentRefSiblingsAreCoerced(t *testing.T) {
	p, err := tools.NewArgumentParser("raw", json.RawMessage(`{"type":"object",`+
		`"$defs":{"Base":{"type":"object","properties":{"a":{"type":"string"},"k":{"type":"integer"}}}},`+
		`"properties":{"x":{"$ref":"#/$defs/Base","properties":{"n":{"type":"integer"}}}}}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.ParseJSON(`{"x":{"a":"s","n":"3","k":"4"}}`)
	if want := `{"x":{"a":"s","k":4,"n":3}}`; err != nil || string(out) != want {
		t.Errorf("got %s, %v; want %s", out, err, want)
	}
}
