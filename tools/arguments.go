package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/troupe-run/troupe/messages"
)

// ArgumentError says what was wrong with a tool's arguments, in words a model can act
// on. It wraps ErrInvalidArguments: errors.Is(err, ErrInvalidArguments) holds.
type ArgumentError struct {
	Tool string
	// Field is the path of the (first) field at fault ("url", "items[2].name"), or
	// empty when the fault is not in one field.
	Field  string
	Reason string
	// Pos is the 1-based character position, inside the argument the reason is about
	// (the calculator's expression), where the problem is; 0 when there is none.
	Pos int
}

func (e *ArgumentError) Error() string {
	if e.Pos > 0 {
		return fmt.Sprintf("%s: invalid arguments: %s at position %d", e.Tool, e.Reason, e.Pos)
	}
	return fmt.Sprintf("%s: invalid arguments: %s", e.Tool, e.Reason)
}

// Unwrap returns ErrInvalidArguments.
func (e *ArgumentError) Unwrap() error { return ErrInvalidArguments }

// decodeArguments decodes a model's raw arguments into v: one JSON object, no unknown
// fields, nothing after it. Empty or blank text means {}. example shows the model what
// a good call looks like.
func decodeArguments(tool, raw, example string, v any) error {
	if strings.TrimSpace(raw) == "" {
		raw = "{}"
	}
	fail := func(reason string) error {
		return &ArgumentError{Tool: tool, Reason: clipQuoted(reason) + "; expected a JSON object such as " + example}
	}
	if t := strings.TrimSpace(raw); t[0] != '{' && t != "null" {
		return fail("arguments are not a JSON object")
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			return fail(fmt.Sprintf("malformed JSON at byte %d: %s", syn.Offset, syn.Error()))
		case errors.As(err, &typ) && typ.Field != "":
			return fail(fmt.Sprintf("field %q must be a %s, not a JSON %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value))
		case errors.Is(err, io.ErrUnexpectedEOF):
			return fail("malformed JSON: the text ends early")
		}
		return fail("malformed JSON: " + strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fail("unexpected text after the JSON object")
	}
	return nil
}

// jsonKind names a Go kind the way JSON Schema would.
func jsonKind(kind string) string {
	switch kind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "struct", "map":
		return "object"
	case "slice", "array":
		return "array"
	}
	return "number"
}

// DecodeArguments reads a model's arguments raw for spec's schema as every tool's
// are read (ArgumentParser: a wrong type, an unknown field or a key written twice is
// an *ArgumentError naming the field; "3" for an integer is 3; empty text is {}),
// into v: for a tool that decodes its own arguments into a Go value.
func DecodeArguments(spec messages.ToolSpec, raw string, v any) error {
	p, err := NewArgumentParser(spec.Name, spec.Parameters, 0)
	if err != nil {
		return err
	}
	b, err := p.ParseJSON(raw)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return &ArgumentError{Tool: spec.Name, Reason: unfitReason(err)}
	}
	return nil
}
