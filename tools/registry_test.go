package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// specTool is a tool with a given spec.
type specTool messages.ToolSpec

func (s specTool) Spec() messages.ToolSpec                        { return messages.ToolSpec(s) }
func (specTool) Call(context.Context, tools.Call) (string, error) { return "", nil }

func TestRegistry(t *testing.T) {
	zeta := specTool{Name: "zeta", Description: "z", Parameters: json.RawMessage("{\n  \"type\": \"object\"\n}")}
	r, err := tools.NewRegistry(zeta, tools.NewClock(nil), tools.Calculator{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Names(), []string{"calculator", "clock", "zeta"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	specs := r.Specs()
	if len(specs) != 3 || specs[0].Name != "calculator" || specs[1].Name != "clock" || specs[2].Name != "zeta" {
		t.Fatalf("Specs() = %+v", specs)
	}
	if got := string(specs[2].Parameters); got != `{"type":"object"}` {
		t.Errorf("parameters not compacted: %s", got)
	}
	if c, ok := r.Get("calculator"); !ok || c.Spec().Name != "calculator" {
		t.Errorf("Get(calculator) = %v, %v", c, ok)
	}
	if _, ok := r.Get("nope"); ok {
		t.Error("Get(nope) found a tool")
	}

	// Registration order does not change the bytes a prompt is built from.
	r2, err := tools.NewRegistry(tools.Calculator{}, zeta, tools.NewClock(nil))
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := json.Marshal(r.Specs())
	b2, _ := json.Marshal(r2.Specs())
	if string(b1) != string(b2) {
		t.Errorf("specs depend on registration order:\n%s\n%s", b1, b2)
	}

	// Callers cannot change the registry through what it returns.
	specs[0].Name = "changed"
	specs[2].Parameters[0] = '['
	b3, _ := json.Marshal(r.Specs())
	if string(b3) != string(b1) {
		t.Error("modifying Specs() changed the registry")
	}
}

func TestRegistryRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tools []tools.Tool
		want  string
	}{
		{"duplicate", []tools.Tool{tools.Calculator{}, specTool{Name: "calculator"}}, `two tools are named "calculator"`},
		{"nil", []tools.Tool{nil}, "tool 0 is nil"},
		{"empty name", []tools.Tool{specTool{}}, "1 to 64 characters"},
		{"long name", []tools.Tool{specTool{Name: strings.Repeat("a", 65)}}, "1 to 64 characters"},
		{"bad name", []tools.Tool{specTool{Name: "web search"}}, "letters, digits"},
		{"bad schema", []tools.Tool{specTool{Name: "x", Parameters: json.RawMessage(`{"type":`)}}, "not valid JSON"},
		{"schema not an object", []tools.Tool{specTool{Name: "x", Parameters: json.RawMessage(`[]`)}}, "JSON Schema object"},
	} {
		if _, err := tools.NewRegistry(tc.tools...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	r, err := tools.NewRegistry()
	if err != nil || len(r.Names()) != 0 || len(r.Specs()) != 0 {
		t.Errorf("empty registry: %v, %v", r, err)
	}
}

func ExampleRegistry() {
	r, err := tools.NewRegistry(tools.NewClock(nil), tools.Calculator{})
	if err != nil {
		panic(err)
	}
	for _, s := range r.Specs() { // sorted by name, whatever the registration order
		fmt.Println(s.Name)
	}
	calc, _ := r.Get("calculator")
	out, _ := calc.Call(context.Background(), tools.Call{Arguments: `{"expression": "2^10"}`})
	fmt.Println(out)
	// Output:
	// calculator
	// clock
	// 1024
}
