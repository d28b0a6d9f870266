package tools_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
)

// Two fields that break a rule the validator checks (a pattern) are refused with
// the same error every time.
func TestArgumentValidatorProblemsAreInAFixedOrder(t *testing.T) {
	var props []string
	for i := range 8 {
		props = append(props, fmt.Sprintf(`"f%d":{"type":"string","pattern":"^x$"}`, i))
	}
	p, err := tools.NewArgumentParser("pat", []byte(`{"type":"object","properties":{`+strings.Join(props, ",")+`}}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	args := `{"f0":"y","f1":"y","f2":"y","f3":"y","f4":"y","f5":"y","f6":"y","f7":"y"}`
	seen := map[string]bool{}
	for range 50 {
		_, err := p.Parse(args)
		if err == nil {
			t.Fatal("the patterns were not checked")
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

// The problem said is the one the validator says when it checks the first failing
// field in key order first: of the texts the same arguments could be refused with
// before, one, the same every time, and word for word what a field failing alone
// is refused with (nested paths, a schema of another draft).
func TestArgumentValidatorProblemIsTheFirstFieldsInKeyOrder(t *testing.T) {
	for _, c := range []struct{ schema, both, alone, want string }{{
		schema: `{"type":"object","properties":{"b":{"type":"string","pattern":"^x$"},"a":{"type":"string","pattern":"^x$"}}}`,
		both:   `{"b":"y","a":"z"}`, alone: `{"b":"x","a":"z"}`,
		want: `"a" does not match the schema: pattern: "z" does not match regular expression "^x$"`,
	}, {
		schema: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{` +
			`"o":{"type":"object","properties":{"n":{"type":"integer","multipleOf":3}}},"p":{"type":"integer","multipleOf":5}}}`,
		both: `{"p":7,"o":{"n":4}}`, alone: `{"p":10,"o":{"n":4}}`,
		want: `"o.n" does not match the schema: multipleOf: 4/1 is not a multiple of 3.000000`, // the validator's words
	}, {
		schema: `{"type":"object","properties":{"o":{"type":"object","properties":{` +
			`"n":{"type":"string","pattern":"^x$"},"m":{"type":"string","pattern":"^x$"}}}}}`,
		both: `{"o":{"n":"y","m":"w"}}`, alone: `{"o":{"n":"x","m":"w"}}`,
		want: `"o.m" does not match the schema: pattern: "w" does not match regular expression "^x$"`,
	}} {
		p, err := tools.NewArgumentParser("t", []byte(c.schema), 0)
		if err != nil {
			t.Fatal(err)
		}
		_, alone := p.Parse(c.alone)
		if alone == nil || !strings.Contains(alone.Error(), c.want) {
			t.Fatalf("%s alone: %v, want %s", c.alone, alone, c.want)
		}
		for range 20 {
			if _, err := p.Parse(c.both); err == nil || err.Error() != alone.Error() {
				t.Fatalf("%s: %v, want %v", c.both, err, alone)
			}
		}
	}
}
