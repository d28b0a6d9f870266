package tools

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// SchemaFor derives the JSON Schema of a tool's arguments from the Go type A, which
// must be a struct (or a map with string keys): the schema's type is "object".
//
// It is github.com/google/jsonschema-go's For, whose conventions hold: a field's JSON
// name is its json tag's; a field is required unless its json tag says omitempty or
// omitzero; no other properties are allowed; the jsonschema tag is the description
// (`jsonschema:"The URL to fetch"`). That library reserves "WORD=" in its tag, so the
// other keywords go in a tool tag, comma-separated, spelled as in JSON Schema:
//
//	Method string `json:"method,omitempty" jsonschema:"GET or HEAD" tool:"enum=GET|HEAD"`
//	Limit  int    `json:"limit,omitempty" tool:"minimum=1,maximum=100"`
//	Name   string `json:"name" tool:"minLength=1,maxLength=64,pattern=^[a-z]+$"`
//
// Keywords: enum (values separated by |, typed as the field: enum=1|2 on an int),
// minimum, maximum, exclusiveMinimum, exclusiveMaximum, minLength, maxLength,
// minItems, maxItems, pattern (last: it takes the rest of the tag, commas and all),
// format, default (a JSON value), required and optional (to override what the json
// tag implies). On a slice, enum, minLength, maxLength, pattern and format apply to
// its items.
func SchemaFor[A any]() (*jsonschema.Schema, error) {
	return schemaForType(reflect.TypeFor[A]())
}

func schemaForType(t reflect.Type) (*jsonschema.Schema, error) {
	s, err := jsonschema.ForType(t, nil)
	if err != nil {
		return nil, fmt.Errorf("tools: schema of %s: %w", t, err)
	}
	if s.Type != "object" {
		return nil, fmt.Errorf("tools: arguments of type %s have the schema type %q: want a struct or a map, whose schema is an object", t, schemaType(s))
	}
	if err := applyTags(t, s); err != nil {
		return nil, fmt.Errorf("tools: schema of %s: %w", t, err)
	}
	dropNull(s)
	return s, nil
}

// dropNull turns the types ["null", X] that ForType gives pointers and slices into
// X: models read a single type more reliably, and a null for an optional field is
// taken as its absence (ArgumentParser).
func dropNull(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) == 2 && s.Types[0] == "null" {
		s.Type, s.Types = s.Types[1], nil
	}
	for _, p := range s.Properties {
		dropNull(p)
	}
	dropNull(s.Items)
	dropNull(s.AdditionalProperties)
}

func schemaType(s *jsonschema.Schema) string {
	if s.Type != "" {
		return s.Type
	}
	return strings.Join(s.Types, "|")
}

// applyTags adds the keywords of the tool tags of t's fields (and of the structs
// inside it) to s, the schema ForType derived from t.
func applyTags(t reflect.Type, s *jsonschema.Schema) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s == nil {
		return nil
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return applyTags(t.Elem(), s.Items)
	case reflect.Map:
		return applyTags(t.Elem(), s.AdditionalProperties)
	case reflect.Struct:
	default:
		return nil
	}
	for _, f := range reflect.VisibleFields(t) {
		if f.Anonymous || !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		ps := s.Properties[name]
		if ps == nil {
			continue
		}
		if tag, ok := f.Tag.Lookup("tool"); ok {
			if err := applyTag(f, name, tag, s, ps); err != nil {
				return err
			}
		}
		if err := applyTags(f.Type, ps); err != nil {
			return err
		}
	}
	return nil
}

// applyTag applies one field's tool tag to its property schema ps (in the object
// schema parent).
func applyTag(f reflect.StructField, name, tag string, parent, ps *jsonschema.Schema) error {
	ft := f.Type
	for ft.Kind() == reflect.Pointer {
		ft = ft.Elem()
	}
	// Keywords about values apply to the items of a slice.
	valueSchema, valueType := ps, ft
	if (ft.Kind() == reflect.Slice || ft.Kind() == reflect.Array) && ps.Items != nil && ft.Elem().Kind() != reflect.Uint8 {
		valueSchema, valueType = ps.Items, ft.Elem()
		for valueType.Kind() == reflect.Pointer {
			valueType = valueType.Elem()
		}
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("field %s (%q): tool tag %q: %s", f.Name, name, tag, fmt.Sprintf(format, args...))
	}
	for rest := tag; rest != ""; {
		var item string
		item, rest, _ = strings.Cut(rest, ",")
		key, val, hasVal := strings.Cut(strings.TrimSpace(item), "=")
		if key == "pattern" && hasVal {
			val, rest = val+joinRest(rest), ""
		}
		num := func() (*float64, error) {
			v, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return nil, bad("%s=%q is not a number", key, val)
			}
			return &v, nil
		}
		count := func() (*int, error) {
			v, err := strconv.Atoi(val)
			if err != nil || v < 0 {
				return nil, bad("%s=%q is not a count", key, val)
			}
			return &v, nil
		}
		var err error
		switch key {
		case "":
		case "required":
			if !slices.Contains(parent.Required, name) {
				parent.Required = append(parent.Required, name)
			}
		case "optional":
			parent.Required = slices.DeleteFunc(slices.Clone(parent.Required), func(r string) bool { return r == name })
		case "enum":
			valueSchema.Enum = nil
			for v := range strings.SplitSeq(val, "|") {
				ev, perr := enumValue(valueType, v)
				if perr != nil {
					return bad("%v", perr)
				}
				valueSchema.Enum = append(valueSchema.Enum, ev)
			}
		case "minimum":
			valueSchema.Minimum, err = num()
		case "maximum":
			valueSchema.Maximum, err = num()
		case "exclusiveMinimum":
			valueSchema.ExclusiveMinimum, err = num()
		case "exclusiveMaximum":
			valueSchema.ExclusiveMaximum, err = num()
		case "minLength":
			valueSchema.MinLength, err = count()
		case "maxLength":
			valueSchema.MaxLength, err = count()
		case "minItems":
			ps.MinItems, err = count()
		case "maxItems":
			ps.MaxItems, err = count()
		case "pattern":
			valueSchema.Pattern = val
		case "format":
			valueSchema.Format = val
		case "default":
			if !json.Valid([]byte(val)) {
				return bad("default=%s is not a JSON value", val)
			}
			ps.Default = json.RawMessage(val)
		default:
			return bad("unknown keyword %q (want enum, minimum, maximum, exclusiveMinimum, exclusiveMaximum, "+
				"minLength, maxLength, minItems, maxItems, pattern, format, default, required or optional)", key)
		}
		if err != nil {
			return err
		}
		if !hasVal && key != "required" && key != "optional" && key != "" {
			return bad("%s needs a value (%s=...)", key, key)
		}
	}
	return nil
}

func joinRest(rest string) string {
	if rest == "" {
		return ""
	}
	return "," + rest
}

// enumValue reads one enum value as the Go kind t holds.
func enumValue(t reflect.Type, v string) (any, error) {
	switch t.Kind() {
	case reflect.String:
		return v, nil
	case reflect.Bool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("enum value %q is not a boolean", v)
		}
		return b, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("enum value %q is not an integer", v)
		}
		return n, nil
	case reflect.Float32, reflect.Float64:
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("enum value %q is not a number", v)
		}
		return n, nil
	}
	return nil, fmt.Errorf("enum on a field of kind %s is not supported", t.Kind())
}
