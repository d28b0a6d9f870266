package tools

import (
	"encoding/json"
	"strings"
)

// NamedCall is a call of one tool by name through another: what the search
// disclosure's call_tool is asked (package disclosure), and what a session reads in
// a call_tool call to see whether it runs a chain (package actors). Both parse it
// with ParseNamedCall, so they agree on what it names.
type NamedCall struct {
	// Name is the tool to call.
	Name string
	// Arguments is the tool's raw argument text: the JSON object given, or the
	// text of a JSON string given instead; "" when absent or null.
	Arguments string
}

// NamedCallExample is a call_tool call's arguments, for error messages.
const NamedCallExample = `{"name": "github_create_issue", "arguments": {"title": "..."}}`

// ParseNamedCall reads the arguments of tool, a tool that calls another by name: one
// JSON object {"name": ..., "arguments": ...} without other fields. Malformed
// arguments give an *ArgumentError naming tool.
func ParseNamedCall(tool, raw string) (NamedCall, error) {
	var a struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := decodeArguments(tool, raw, NamedCallExample, &a); err != nil {
		return NamedCall{}, err
	}
	args := strings.TrimSpace(string(a.Arguments))
	if args == "null" {
		args = ""
	}
	if strings.HasPrefix(args, `"`) { // arguments given as JSON text
		var s string
		if json.Unmarshal(a.Arguments, &s) == nil {
			args = s
		}
	}
	return NamedCall{Name: a.Name, Arguments: args}, nil
}
