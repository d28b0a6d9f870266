package tools_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
)

// A model's arguments with problems inside an object no schema describes (an
// object of a schema without properties: a chain's input with no input_schema)
// are refused with the same error every time: a chain's session decides the
// refusal (actors.decideChain), and replay verify compares it.
func TestArgumentProblemsInAnObjectWithoutSchemaAreInAFixedOrder(t *testing.T) {
	p, err := tools.NewArgumentParser("any", []byte(`{"type":"object"}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(`{"o":{`)
	for i := range 12 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"k%02d":1e999`, i)
	}
	b.WriteString(`}}`)
	seen := map[string]bool{}
	for range 50 {
		_, err := p.Parse(b.String())
		if err == nil {
			t.Fatal("1e999 was taken")
		}
		seen[err.Error()] = true
	}
	if len(seen) != 1 {
		for e := range seen {
			t.Log(e)
		}
		t.Fatalf("the same arguments were refused with %d different errors", len(seen))
	}
}
