package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/tools"
)

func calc(t testing.TB, expr string) (string, error) {
	t.Helper()
	args, err := json.Marshal(map[string]string{"expression": expr})
	if err != nil {
		t.Fatal(err)
	}
	return tools.Calculator{}.Call(context.Background(), tools.Call{Key: "k", Arguments: string(args)})
}

func TestCalculatorResults(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"12 * (7 + 5)", "144"},
		{"1 + 2 * 3", "7"},
		{"(1 + 2) * 3", "9"},
		{"10 - 4 - 3", "3"},   // left-associative
		{"100 / 10 / 5", "2"}, // left-associative
		{"7 / 2", "3.5"},
		{"1 / 3", "0.3333333333333333"},
		{"0.1 + 0.2", "0.30000000000000004"}, // the float64 truth, shortest form
		{"7 % 3", "1"},
		{"-7 % 3", "-1"}, // sign of the dividend
		{"7.5 % 2", "1.5"},
		{"2 ^ 10", "1024"},
		{"2 ** 10", "1024"},
		{"2 ^ 3 ^ 2", "512"}, // right-associative
		{"(2 ^ 3) ^ 2", "64"},
		{"-2 ^ 2", "-4"}, // ^ binds tighter than unary minus
		{"(-2) ^ 2", "4"},
		{"2 ^ -1", "0.5"},
		{"2 ^ -2 ^ 2", "0.0625"},
		{"(-8) ^ 3", "-512"},
		{"-3", "-3"},
		{"--3", "3"},
		{"+-+3", "-3"},
		{"- (2 + 3)", "-5"},
		{"2 * -3", "-6"},
		{".5 + 5.", "5.5"},
		{"1.5e3", "1500"},
		{"1.5E+3", "1500"},
		{"2.5e-3", "0.0025"},
		{"1e21", "1e+21"},
		{"1e20", "100000000000000000000"},
		{"2 ^ 64", "18446744073709552000"}, // shortest digits that read back as the same float64
		{"1e-7", "1e-7"},
		{"0.000001", "0.000001"},
		{"123456789 * 1000", "123456789000"},
		{"-0", "0"},
		{"0 * -1", "0"},
		{"pi", "3.141592653589793"},
		{"PI", "3.141592653589793"},
		{"e", "2.718281828459045"},
		{"2e", ""}, // 2 then the constant e: an operator is missing (error)
		{"2*e", "5.43656365691809"},
		{"sqrt(144)", "12"},
		{"sqrt(2) ^ 2", "2.0000000000000004"},
		{"abs(-4.5)", "4.5"},
		{"round(2.5)", "3"},
		{"round(-2.5)", "-3"}, // half away from zero
		{"round(3.14159, 2)", "3.14"},
		{"round(1234, -2)", "1200"},
		{"floor(-1.5)", "-2"},
		{"ceil(-1.5)", "-1"},
		{"min(3, 1, 2)", "1"},
		{"max(3, 1, 2)", "3"},
		{"max(4)", "4"},
		{"pow(2, 8)", "256"},
		{"ln(e)", "1"},
		{"log(e ^ 2)", "2"},
		{"log(8, 2)", "3"},
		{"log10(1000)", "3"},
		{"log2(1024)", "10"},
		{"exp(0)", "1"},
		{"sin(0)", "0"},
		{"cos(pi)", "-1"},
		{"tan(0)", "0"},
		{"atan(1) * 4", "3.141592653589793"},
		{"Sqrt(16) + MAX(1, 2)", "6"},
		{"sqrt(sqrt(sqrt(256)))", "2"},
		{"max(1 + 2, 2 * 2, (5))", "5"},
		{" \t12\n*\r\n2 ", "24"},
		{strings.Repeat("(", 100) + "1" + strings.Repeat(")", 100), "1"},
		{strings.Repeat("1+", 499) + "1", "500"}, // long but flat: no recursion limit
	} {
		got, err := calc(t, tc.expr)
		if tc.want == "" {
			if err == nil {
				t.Errorf("%q = %s, want an error", tc.expr, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q = %q, %v; want %q", tc.expr, got, err, tc.want)
		}
	}
}

func TestCalculatorErrors(t *testing.T) {
	for _, tc := range []struct {
		args string
		pos  int    // position reported, 0 for none
		want string // substring of the reason
	}{
		// The arguments themselves.
		{`not json`, 0, "neither a JSON object nor key=value pairs"},
		{`{"expression": "1+1"`, 0, "malformed JSON"},
		{`{"expression": null}`, 0, `"expression" must be a string, not null`},
		{`{"expression": ["1+1"]}`, 0, `"expression" must be a string, not an array`},
		{`{}`, 0, `missing the required field "expression"`},
		{``, 0, `missing the required field "expression"`},
		{`null`, 0, `missing the required field "expression"`},
		{`{"expr": "1+1"}`, 0, `unknown field "expr"`},
		{`{"expression": "1", "expression": "2"}`, 0, `the key "expression" appears twice`},
		{`{"expression": "1"} {"expression": "2"}`, 0, "after the JSON value"},
		{`"1+1"`, 0, "the arguments are a JSON string"},
		{`[1]`, 0, "the arguments are a JSON array"},
		// Syntax.
		{`{"expression": ""}`, 0, "expression is empty"},
		{`{"expression": "   "}`, 0, "expression is empty"},
		{`{"expression": "foo + 1"}`, 1, `unknown name "foo"`},
		{`{"expression": "2 * bar(3)"}`, 5, `unknown name "bar"`},
		{`{"expression": "(1 + 2"}`, 1, "'(' is never closed"},
		{`{"expression": "sqrt(4"}`, 5, "'(' is never closed"},
		{`{"expression": "1 + 2)"}`, 6, "')' has no matching '('"},
		{`{"expression": "(1 + 2))"}`, 8, "')' has no matching '('"},
		{`{"expression": "()"}`, 2, "unexpected ')'"},
		{`{"expression": "1 2"}`, 3, "unexpected number 2 after a complete expression"},
		{`{"expression": "2 pi"}`, 3, `unexpected name "pi"`},
		{`{"expression": "2(3)"}`, 2, `unexpected "("`},
		{`{"expression": "1 +"}`, 4, "expression ends early"},
		{`{"expression": "* 2"}`, 1, `unexpected "*"`},
		{`{"expression": "1 + # 2"}`, 5, "unexpected character '#'"},
		{`{"expression": "2 × 3"}`, 3, "unexpected character '×'"},
		{`{"expression": "é + 1"}`, 1, "unexpected character 'é'"},
		{`{"expression": "1 + é"}`, 5, "unexpected character 'é'"}, // position in characters, not bytes
		{`{"expression": "1.2.3"}`, 4, "unexpected number .3"},
		{`{"expression": "1e999"}`, 1, "too large"},
		{`{"expression": "sqrt"}`, 1, "sqrt is a function"},
		{`{"expression": "pi(2)"}`, 1, "pi is a constant"},
		{`{"expression": "sqrt()"}`, 1, "sqrt takes 1 argument, got 0"},
		{`{"expression": "sqrt(1, 2)"}`, 1, "sqrt takes 1 argument, got 2"},
		{`{"expression": "pow(2)"}`, 1, "pow takes 2 arguments, got 1"},
		{`{"expression": "min()"}`, 1, "min takes at least 1 argument(s), got 0"},
		{`{"expression": "max(1,)"}`, 7, "unexpected ')'"},
		{`{"expression": "__import__(1)"}`, 1, `unknown name "__import__"`},
		// Evaluation.
		{`{"expression": "1 / 0"}`, 3, "division by zero"},
		{`{"expression": "1 / (2 - 2)"}`, 3, "division by zero"},
		{`{"expression": "5 % 0"}`, 3, "division by zero"},
		{`{"expression": "0 ^ -1"}`, 3, "division by zero"},
		{`{"expression": "pow(0, -1)"}`, 1, "division by zero"},
		{`{"expression": "10 ^ 400"}`, 4, "not finite"},
		{`{"expression": "1e308 * 10"}`, 7, "not finite"},
		{`{"expression": "exp(1000)"}`, 1, "not finite"},
		{`{"expression": "sqrt(-1)"}`, 1, "square root of a negative number"},
		{`{"expression": "(-8) ^ (1/3)"}`, 6, "fractional power"},
		{`{"expression": "ln(0)"}`, 1, "logarithm"},
		{`{"expression": "log(-1)"}`, 1, "logarithm"},
		{`{"expression": "log(8, 1)"}`, 1, "base"},
		{`{"expression": "asin(2)"}`, 1, "between -1 and 1"},
		{`{"expression": "round(1, 0.5)"}`, 1, "integer between -15 and 15"},
		{`{"expression": "1 + 1/0 + )"}`, 11, "unexpected ')'"}, // syntax is checked before evaluation
		// Limits.
		{fmt.Sprintf(`{"expression": %q}`, strings.Repeat("1", 1001)), 0, `"expression" must be at most 1000 characters long, not 1001`},
		{fmt.Sprintf(`{"expression": %q}`, strings.Repeat("(", 101)+"1"+strings.Repeat(")", 101)), 101, "nested too deeply"},
		{fmt.Sprintf(`{"expression": %q}`, strings.Repeat("-", 101)+"1"), 101, "nested too deeply"},
		{fmt.Sprintf(`{"expression": %q}`, strings.Repeat("2^", 101)+"1"), 202, "nested too deeply"},
		{fmt.Sprintf(`{"expression": %q}`, strings.Repeat("abs(", 101)+"1"+strings.Repeat(")", 101)), 404, "nested too deeply"},
	} {
		_, err := tools.Calculator{}.Call(context.Background(), tools.Call{Arguments: tc.args})
		if !errors.Is(err, tools.ErrInvalidArguments) {
			t.Errorf("%s: error %v does not wrap ErrInvalidArguments", tc.args, err)
			continue
		}
		var ae *tools.ArgumentError
		if !errors.As(err, &ae) {
			t.Errorf("%s: error %v is not an *ArgumentError", tc.args, err)
			continue
		}
		if !strings.Contains(ae.Reason, tc.want) || ae.Pos != tc.pos || ae.Tool != "calculator" {
			t.Errorf("%s:\n got  %q (position %d)\n want %q (position %d)", tc.args, err, ae.Pos, tc.want, tc.pos)
		}
	}
}

func TestCalculatorErrorText(t *testing.T) {
	_, err := calc(t, "12 / (3 - 3)")
	if got, want := err.Error(), "calculator: invalid arguments: division by zero at position 4"; got != want {
		t.Errorf("error text %q, want %q", got, want)
	}
}

func TestCalculatorCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (tools.Calculator{}).Call(ctx, tools.Call{Arguments: `{"expression": "1"}`}); !errors.Is(err, context.Canceled) {
		t.Errorf("Call with a cancelled ctx: %v", err)
	}
}

func TestCalculatorSpec(t *testing.T) {
	spec := tools.Calculator{}.Spec()
	if spec.Name != "calculator" || spec.Description == "" {
		t.Errorf("spec %+v", spec)
	}
	var schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(spec.Parameters, &schema); err != nil {
		t.Fatalf("parameters are not JSON: %v", err)
	}
	if schema.Type != "object" || !slices.Equal(slices.Sorted(maps.Keys(schema.Properties)), []string{"expression"}) ||
		!slices.Equal(schema.Required, []string{"expression"}) {
		t.Errorf("schema %s", spec.Parameters)
	}
	// Every function the description names exists, and every known name is described.
	for _, name := range []string{"sqrt", "abs", "round", "floor", "ceil", "min", "max", "pow", "ln", "log",
		"log10", "log2", "exp", "sin", "cos", "tan", "asin", "acos", "atan", "pi", "e"} {
		if !strings.Contains(spec.Description, name) {
			t.Errorf("description does not mention %s", name)
		}
		if _, err := calc(t, name+"(1)"); err != nil && strings.Contains(err.Error(), "unknown name") {
			t.Errorf("%s is described but unknown: %v", name, err)
		}
	}
}

func TestFormatNumber(t *testing.T) {
	for v, want := range map[float64]string{
		144: "144", -3: "-3", 0.5: "0.5", 1e21: "1e+21", 1e-7: "1e-7", 1.5e300: "1.5e+300",
		math.Copysign(0, -1): "0", 123456.789: "123456.789", 9007199254740993: "9007199254740992", 1e-300: "1e-300", -2.5e-10: "-2.5e-10",
	} {
		if got := tools.FormatNumber(v); got != want {
			t.Errorf("FormatNumber(%v) = %q, want %q", v, got, want)
		}
	}
}

// FuzzCalculator: whatever a model sends, the calculator does not panic and answers
// either a finite number or an error that wraps ErrInvalidArguments.
func FuzzCalculator(f *testing.F) {
	for _, s := range []string{
		"12 * (7 + 5)", "2^3^2", "-2^-2", "sqrt(2)", "max(1, 2, 3)", "round(2.5, 1)", "1/0",
		"((((1))))", "1e308*10", "log(8, 2)", "2 ** 3", ".5e-3", "pi*e", "1 +", ")(", "é",
		`{"expression": "1+1"}`, "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, args := range []string{mustJSON(t, s), s} { // as an expression, and as raw arguments
			got, err := tools.Calculator{}.Call(context.Background(), tools.Call{Arguments: args})
			if err != nil {
				if !errors.Is(err, tools.ErrInvalidArguments) {
					t.Fatalf("%q: error %v does not wrap ErrInvalidArguments", args, err)
				}
				continue
			}
			v, perr := strconv.ParseFloat(got, 64)
			if perr != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("%q: result %q is not a finite number", args, got)
			}
		}
	})
}

func mustJSON(t *testing.T, s string) string {
	b, err := json.Marshal(map[string]string{"expression": s})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ExampleCalculator() {
	calc := tools.Calculator{}
	for _, args := range []string{
		`{"expression": "12 * (7 + 5)"}`,
		`{"expression": "2 ^ 0.5"}`,
		`{"expression": "round(100 / 3, 2)"}`,
		`{"expression": "12 / (3 - 3)"}`,
	} {
		out, err := calc.Call(context.Background(), tools.Call{Arguments: args})
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(out)
	}
	// Output:
	// 144
	// 1.4142135623730951
	// 33.33
	// error: calculator: invalid arguments: division by zero at position 4
}

// The calculator and the clock read their arguments as every tool does
// (ArgumentParser): a number given for a string is taken as its text, key=value
// pairs are arguments, and what the model wrote twice is refused, not half-read.
func TestBuiltinsCoerceArgumentsAsEveryTool(t *testing.T) {
	clock := tools.NewClock(fixedTime(time.Date(2026, 11, 29, 23, 10, 0, 0, time.UTC)))
	for _, tc := range []struct {
		tool       tools.Tool
		args, want string
	}{
		{tools.Calculator{}, `{"expression": 12345}`, "12345"},
		{tools.Calculator{}, `{"expression": -2.5e3}`, "-2500"},
		{tools.Calculator{}, `expression="max(2, 3) * 7"`, "21"},
		{tools.Calculator{}, "expression: 6 * 7", "42"},
		{clock, `timezone=Europe/Paris`, "2026-11-30T00:10:00+01:00 (Monday)"},
		{clock, `{"timezone": null}`, "2026-11-29T23:10:00Z (Sunday)"},
	} {
		got, err := tc.tool.Call(context.Background(), tools.Call{Arguments: tc.args})
		if err != nil || got != tc.want {
			t.Errorf("%s %s: %q, %v; want %q", tc.tool.Spec().Name, tc.args, got, err, tc.want)
		}
	}
}
