package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"unicode/utf8"
)

// Truncate bounds a tool's output for the model: text of at most max bytes is
// returned as is; longer text is cut to its first max bytes (at a UTF-8 character
// boundary) followed by a note saying how much was cut:
//
//	[truncated: 10485760 bytes, showing the first 65536]
//
// max <= 0 means DefaultMaxOutput.
func Truncate(text string, max int) string {
	if max <= 0 {
		max = DefaultMaxOutput
	}
	if len(text) <= max {
		return text
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return fmt.Sprintf("%s\n[truncated: %d bytes, showing the first %d]", text[:cut], len(text), cut)
}

// renderResult writes a function tool's result as text for the model: a string (or
// []byte) as it is, json.RawMessage compacted, anything else as compact JSON.
func renderResult(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case []byte:
		return string(x), nil
	case json.RawMessage:
		var b bytes.Buffer
		if err := json.Compact(&b, x); err != nil {
			return "", fmt.Errorf("the result is not valid JSON: %w", err)
		}
		return b.String(), nil
	case nil:
		return "null", nil
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.String {
		return rv.String(), nil // a named string type
	}
	b, err := marshalCompact(v)
	if err != nil {
		return "", fmt.Errorf("the result cannot be written as JSON: %w", err)
	}
	return string(b), nil
}
