package nodeconfig

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// miscasedKey returns the first key of file (valid JSON, decoded into a value of
// type t) that names a field of t's objects only when case is ignored ("Model" for
// "model"), as a path ("memory.Tool"), with the field's own name: encoding/json
// takes such a key for the field, so a key a reader takes for another (or for none)
// would set it unsaid, and with both given the last would win. "" when there is
// none. Objects decoded by their own UnmarshalJSON, and maps' keys, are not looked
// into as fields.
func miscasedKey(file []byte, t reflect.Type) (path, want string) {
	var v any
	d := json.NewDecoder(bytes.NewReader(file))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return "", ""
	}
	return miscasedIn(v, t, "")
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func miscasedIn(v any, t reflect.Type, path string) (string, string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return "", ""
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return "", ""
		}
		fields := jsonFieldsOf(t)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			at := k
			if path != "" {
				at = path + "." + k
			}
			if f, ok := fields[k]; ok {
				if p, w := miscasedIn(obj[k], f, at); p != "" {
					return p, w
				}
				continue
			}
			for name := range fields {
				if strings.EqualFold(name, k) {
					return at, name
				}
			}
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return "", ""
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			at := k
			if path != "" {
				at = path + "." + k
			}
			if p, w := miscasedIn(obj[k], t.Elem(), at); p != "" {
				return p, w
			}
		}
	case reflect.Slice, reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			return "", ""
		}
		for i, e := range arr {
			if p, w := miscasedIn(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p, w
			}
		}
	}
	return "", ""
}

// jsonFieldsOf maps the JSON names of struct type t's fields (those of embedded
// structs included, as encoding/json flattens them) to their types.
func jsonFieldsOf(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for n, typ := range jsonFieldsOf(ft) {
					if _, ok := fields[n]; !ok {
						fields[n] = typ
					}
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}
