package tools

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// The list of known names in "unknown name" errors matches the tables.
func TestKnownNamesMatchTables(t *testing.T) {
	want := slices.Sorted(maps.Keys(functions))
	want = append([]string{"pi", "e"}, want...)
	if got := strings.Join(want, ", "); got != knownNames {
		t.Errorf("knownNames = %q, tables say %q", knownNames, got)
	}
	for name := range constants {
		if _, clash := functions[name]; clash {
			t.Errorf("%s is both a constant and a function", name)
		}
	}
}

// plainExpression, the calculator's fast path, gives what the argument parser
// gives wherever it answers, and leaves to the parser what it does not read exactly.
func TestSoleStringArgumentAgreesWithTheParser(t *testing.T) {
	inputs := []string{
		`{"expression": "12 * (7 + 5)"}`, `{"expression":"1+1"}`, " \n{ \"expression\" :\t\"2\" } \n",
		`{"expression": "caf\u00e9 \"q\" \\ \n"}`, `{"expression": ""}`, `{"expression": "日本"}`,
		`{"expression": "1", "expression": "2"}`, `{"expression": "1"} x`, `{"expression": "1",}`,
		`{"expression": 12345}`, `{"expression": "1" }}`, `{"expression": "a\"}`, `{"expression": "a\q"}`,
		`{"other": "1"}`, `{"expressions": "1"}`, `expression=1+2`, `{"expression": "tab` + "\t" + `"}`,
		`{"expression": "` + "\xff" + `"}`, `{"expression": null}`, `[]`, ``, `{`, `{"expression"`,
		`{"expression": "` + strings.Repeat("1", 1001) + `"}`,
	}
	for _, in := range inputs {
		fast, ok := plainExpression(in)
		args, err := calculatorArguments.Parse(in)
		if !ok {
			continue // the parser answers
		}
		if err != nil {
			t.Errorf("%q: the fast path read %q, the parser refused: %v", in, fast, err)
			continue
		}
		if want, _ := args["expression"].(string); fast != want {
			t.Errorf("%q: the fast path read %q, the parser %q", in, fast, want)
		}
	}
	for _, in := range []string{`{"expression": "1+1"}`, ` { "expression" : "a\"b" } `} {
		if _, ok := plainExpression(in); !ok {
			t.Errorf("%q: not read by the fast path", in)
		}
	}
}
