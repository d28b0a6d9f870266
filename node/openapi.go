package node

import (
	"encoding"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// OpenAPI returns the OpenAPI 3.0 document of the node's HTTP API, built from its
// route table (Routes): every route with its method, path parameters, query
// parameters, request body and answers, and the answers every route may give
// (401 without a valid token, 413 for a body too large, 408 for a body that comes
// too slowly, 429 past the rate limit).
// GET /openapi.json serves it, behind the token like every route but the public
// ones (PublicPaths): the document says which routes this node serves, which is
// for its clients to know.
func (n *Node) OpenAPI() map[string]any {
	paths := map[string]any{}
	for _, r := range n.Routes() {
		item, _ := paths[openAPIPath(r.Path)].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[openAPIPath(r.Path)] = item
		}
		methods := []string{r.Method}
		if r.Method == "" {
			methods = r.Doc.Methods
			if len(methods) == 0 {
				methods = []string{"GET", "POST"}
			}
		}
		for _, m := range methods {
			item[strings.ToLower(m)] = n.operation(r, m)
		}
	}
	errBody := map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Error"}}}
	return map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{
			"title":   "Troupe node HTTP API",
			"version": "1",
			"description": "The HTTP API of a Troupe node (node serve). With auth tokens configured, every route but " +
				strings.Join(PublicPaths, ", ") + " and the named agents' A2A cards (/a2a/NAME/.well-known/agent-card.json, and A2A 0.2's /a2a/NAME/.well-known/agent.json) needs Authorization: Bearer TOKEN, or the dashboard's session cookie (" + SessionCookie +
				", from POST /v1/auth/login); a state-changing request signed in by the cookie alone also needs its csrf value in " + CSRFHeader + ".",
		},
		"paths": paths,
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"},
				"session": map[string]any{"type": "apiKey", "in": "cookie", "name": SessionCookie}},
			"schemas": map[string]any{"Error": schemaOf(apiError{})},
			"responses": map[string]any{
				"BadRequest":   map[string]any{"description": "the request is malformed", "content": errBody},
				"Unauthorized": map[string]any{"description": "no bearer token (nor dashboard session cookie), or not one of the node's (WWW-Authenticate: Bearer)", "content": errBody},
				"TooLarge":     map[string]any{"description": "the request body is larger than the route takes", "content": errBody},
				"SlowBody": map[string]any{"description": "the request body did not come in time (slower than the node's least body rate once its read timeout passed): nothing was done; send it again",
					"content": errBody},
				"TooMany": map[string]any{"description": "past the rate limit: retry after Retry-After seconds", "content": errBody,
					"headers": map[string]any{"Retry-After": map[string]any{"description": "seconds to wait", "schema": map[string]any{"type": "integer"}}}},
			},
		},
		"security": []any{map[string]any{"bearer": []string{}}, map[string]any{"session": []string{}}},
	}
}

// wildcard matches a ServeMux wildcard: {name} or {name...}.
var wildcard = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)(\.\.\.)?\}`)

// openAPIPath writes a ServeMux path in OpenAPI's form: {name...} becomes {name}.
func openAPIPath(p string) string { return wildcard.ReplaceAllString(p, "{$1}") }

// operation is the OpenAPI operation of route r for method m.
func (n *Node) operation(r Route, m string) map[string]any {
	op := map[string]any{"summary": r.Doc.Summary, "operationId": operationID(m, r.Path)}
	if op["summary"] == "" {
		op["summary"] = m + " " + r.Path
	}
	var params []any
	for _, w := range wildcard.FindAllStringSubmatch(r.Path, -1) {
		p := map[string]any{"name": w[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}}
		if w[2] != "" {
			p["description"] = "the rest of the path, percent-encoded"
		}
		params = append(params, p)
	}
	for _, q := range r.Doc.Query {
		t := q.Type
		if t == "" {
			t = "string"
		}
		params = append(params, map[string]any{"name": q.Name, "in": "query", "required": q.Required,
			"description": q.Description, "schema": map[string]any{"type": t}})
	}
	if params != nil {
		op["parameters"] = params
	}
	if r.Doc.Body != nil && m != "GET" && m != "DELETE" {
		op["requestBody"] = map[string]any{"required": !r.Doc.Body.Optional, "content": content(r.Doc.Body)}
	}
	responses := map[string]any{}
	for _, resp := range r.Doc.Responses {
		o := map[string]any{"description": resp.Description}
		if resp.Body != nil {
			o["content"] = content(resp.Body)
		}
		responses[strconv.Itoa(resp.Status)] = o
	}
	if len(responses) == 0 {
		responses["200"] = map[string]any{"description": "the route's answer"}
	}
	if isPublic(r.Path) {
		op["security"] = []any{} // no token needed
	} else {
		responses["401"] = map[string]any{"$ref": "#/components/responses/Unauthorized"}
		responses["429"] = map[string]any{"$ref": "#/components/responses/TooMany"}
	}
	if _, given := responses["400"]; !given && (params != nil || op["requestBody"] != nil) {
		responses["400"] = map[string]any{"$ref": "#/components/responses/BadRequest"}
	}
	if m == "POST" || m == "PUT" || m == "PATCH" {
		responses["413"] = map[string]any{"$ref": "#/components/responses/TooLarge"}
		if r.MaxBody != 0 || r.Doc.Body != nil { // the route reads its body
			responses["408"] = map[string]any{"$ref": "#/components/responses/SlowBody"}
		}
	}
	op["responses"] = responses
	return op
}

// operationID names an operation: the method and the path's words, in camel case
// (POST /v1/sessions/{id}/cancel: postV1SessionsIdCancel).
func operationID(method, path string) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	for _, w := range strings.FieldsFunc(path, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	}) {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	if len(path) > 1 && strings.HasSuffix(path, "/") { // /ui/ beside /ui
		b.WriteString("Index")
	}
	return b.String()
}

// content is the OpenAPI content object of a body.
func content(b *Body) map[string]any {
	ct := b.ContentType
	if ct == "" {
		ct = "application/json"
	}
	var s any = map[string]any{}
	switch v := b.Schema.(type) {
	case nil:
	case Schema:
		s = v
	default:
		s = schemaOf(v)
	}
	return map[string]any{ct: map[string]any{"schema": s}}
}

// schemaOf derives the JSON Schema (OpenAPI 3.0's dialect) of v's JSON encoding
// from its type: structs by their json tags (embedded structs' fields inline),
// slices as arrays, maps as objects; a Schema is itself.
func schemaOf(v any) map[string]any {
	if s, ok := v.(Schema); ok {
		return s
	}
	return typeSchema(reflect.TypeOf(v), map[reflect.Type]bool{})
}

var (
	timeType      = reflect.TypeFor[time.Time]()
	durationType  = reflect.TypeFor[time.Duration]()
	rawType       = reflect.TypeFor[json.RawMessage]()
	marshalerType = reflect.TypeFor[json.Marshaler]()
	textType      = reflect.TypeFor[encoding.TextMarshaler]()
)

func typeSchema(t reflect.Type, seen map[reflect.Type]bool) map[string]any {
	if t == nil {
		return map[string]any{}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == rawType:
		return map[string]any{"description": "any JSON value"}
	case t == durationType:
		return map[string]any{"type": "integer", "description": "nanoseconds"}
	case t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType):
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Float32 {
			return map[string]any{"type": "string", "format": "byte", "description": "little-endian float32 components, base64"}
		}
		return map[string]any{"description": fmt.Sprintf("%s in its own JSON encoding", t.Name())}
	case t.Implements(textType) || reflect.PointerTo(t).Implements(textType):
		return map[string]any{"type": "string"}
	}
	switch t.Kind() {
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "format": "byte"}
		}
		return map[string]any{"type": "array", "items": typeSchema(t.Elem(), seen)}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": typeSchema(t.Elem(), seen)}
	case reflect.Struct:
		if seen[t] {
			return map[string]any{"type": "object", "description": t.Name() + " (recursive)"}
		}
		seen[t] = true
		defer delete(seen, t)
		props := map[string]any{}
		addFields(t, props, seen)
		return map[string]any{"type": "object", "properties": props}
	}
	return map[string]any{}
}

// addFields adds the JSON fields of struct t to props, those of its embedded
// structs inline (as encoding/json encodes them).
func addFields(t reflect.Type, props map[string]any, seen map[reflect.Type]bool) {
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				addFields(ft, props, seen)
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		s := typeSchema(f.Type, seen)
		if strings.Contains(opts, "string") {
			s = map[string]any{"type": "string"}
		}
		props[name] = s
	}
}

// openAPI serves the OpenAPI document.
func (n *Node) openAPI(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, n.OpenAPI())
}
