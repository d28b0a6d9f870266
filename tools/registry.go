package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/troupe-run/troupe/messages"
)

// Registry is the set of tools an agent may call, by name. It is immutable and safe
// for concurrent use.
//
// Specs are read once, when the registry is built, and kept sorted by name with their
// JSON Schemas compacted, so the tool section of every prompt is byte-identical from
// call to call (which keeps provider prompt caches warm and replay prompt hashes
// stable) whatever order the tools were registered in.
type Registry struct {
	tools map[string]Tool
	specs []messages.ToolSpec // sorted by name
}

// NewRegistry builds a registry. It fails on a nil tool, a name that models cannot
// call (OpenAI-compatible APIs accept 1 to 64 letters, digits, '_' and '-'), a
// Parameters value that is not a JSON Schema of an object (NewArgumentParser's
// checks), and two tools with the same name.
func NewRegistry(tools ...Tool) (*Registry, error) {
	r := &Registry{tools: make(map[string]Tool, len(tools))}
	for i, t := range tools {
		if t == nil {
			return nil, fmt.Errorf("tools: tool %d is nil", i)
		}
		spec := t.Spec()
		if err := checkToolName(spec.Name); err != nil {
			return nil, fmt.Errorf("tools: tool %d: %w", i, err)
		}
		if _, dup := r.tools[spec.Name]; dup {
			return nil, fmt.Errorf("tools: two tools are named %q", spec.Name)
		}
		if len(spec.Parameters) > 0 {
			var buf bytes.Buffer
			if err := json.Compact(&buf, spec.Parameters); err != nil {
				return nil, fmt.Errorf("tools: tool %q: parameters are not valid JSON: %w", spec.Name, err)
			}
			if buf.Len() == 0 || buf.Bytes()[0] != '{' {
				return nil, fmt.Errorf("tools: tool %q: parameters must be a JSON Schema object", spec.Name)
			}
			spec.Parameters = buf.Bytes()
			// The schema goes to the model with every request: one JSON Schema
			// does not accept would have a provider that checks schemas refuse
			// them all, and a call could not pass it.
			if _, err := NewArgumentParser(spec.Name, spec.Parameters, 0); err != nil {
				return nil, err
			}
		}
		r.tools[spec.Name] = t
		r.specs = append(r.specs, spec)
	}
	slices.SortFunc(r.specs, func(a, b messages.ToolSpec) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return r, nil
}

func checkToolName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("tool name %q must have 1 to 64 characters", name)
	}
	for _, c := range []byte(name) {
		if !(isLetter(c) || isDigit(c) || c == '-') {
			return fmt.Errorf("tool name %q may hold only letters, digits, '_' and '-'", name)
		}
	}
	return nil
}

// Get returns the tool with that name.
func (r *Registry) Get(name string) (Tool, bool) {
	if r == nil {
		return nil, false
	}
	t, ok := r.tools[name]
	return t, ok
}

// Specs returns the tools' specs sorted by name. The result is the caller's to modify.
func (r *Registry) Specs() []messages.ToolSpec {
	if r == nil {
		return nil
	}
	out := slices.Clone(r.specs)
	for i := range out {
		out[i].Parameters = bytes.Clone(out[i].Parameters)
	}
	return out
}

// Names returns the tools' names, sorted.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	names := make([]string, len(r.specs))
	for i, s := range r.specs {
		names[i] = s.Name
	}
	return names
}
