package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"mime"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/internal/jsonkeys"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// Names and limits of what the client offers.
const (
	// Separator joins a server's name and its tool's: "everything__echo".
	Separator = "__"
	// The tools that reach a server's resources and prompts, after "<server>__".
	ReadResource  = "read_resource"
	ListResources = "list_resources"
	GetPrompt     = "get_prompt"
	// IdempotencyKeyMeta is the _meta key of a tool call that carries the call's
	// idempotency key: a server with side effects performs them once per key.
	IdempotencyKeyMeta = "troupe/idempotency_key"

	maxNameLen        = 64
	maxDescription    = 2 << 10
	maxSchemaBytes    = 64 << 10
	maxListedInDoc    = 2 << 10 // resources or prompts listed in a tool's description
	maxListedItems    = 1000    // tools, resources, templates or prompts kept from one server
	descriptionCutSfx = " …"
)

// list lists the server's tools, resources and prompts on cs and makes them the
// server's tools in the catalog.
func (s *server) list(ctx context.Context, cs *sdk.ClientSession) error {
	// The notifications before this listing are covered when it ends, well or
	// not (a failed listing keeps the last list: waiting longer would not help).
	defer s.listedTo(s.noticedCount())
	caps := &sdk.ServerCapabilities{}
	if r := cs.InitializeResult(); r != nil && r.Capabilities != nil {
		caps = r.Capabilities
	}
	var remote []*sdk.Tool
	if caps.Tools != nil {
		var err error
		if remote, err = collect(cs.Tools(ctx, nil), s.c.cfg.MaxTools+1); err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
	}
	var resources []*sdk.Resource
	var templates []*sdk.ResourceTemplate
	if caps.Resources != nil {
		var err error
		if resources, err = collect(cs.Resources(ctx, nil), maxListedItems); err != nil {
			return fmt.Errorf("list resources: %w", err)
		}
		// Templates are optional to servers: one that has none may answer an error.
		templates, _ = collect(cs.ResourceTemplates(ctx, nil), maxListedItems)
	}
	var prompts []*sdk.Prompt
	if caps.Prompts != nil {
		var err error
		if prompts, err = collect(cs.Prompts(ctx, nil), maxListedItems); err != nil {
			return fmt.Errorf("list prompts: %w", err)
		}
	}
	ts, skipped := s.build(remote, caps.Resources != nil, resources, templates, caps.Prompts != nil, prompts)
	s.mu.Lock()
	before := s.skipped
	s.mu.Unlock()
	// A tool left out is said once, not again at each listing of the same offer
	// (a list_changed, a reconnection): Status keeps saying it.
	for _, why := range skipped {
		if !slices.Contains(before, why) {
			s.c.cfg.Logger.Warn("mcp server: tool left out", "mcp_server", s.name, "why", why)
		}
	}
	s.mu.Lock()
	s.tools, s.skipped = ts, skipped
	offerChanged := s.setOffer(caps, resources, templates, prompts)
	s.mu.Unlock()
	s.c.rebuild(offerChanged)
	return nil
}

// collect reads a paginated list, at most limit items: the rest is left out (a
// server that pages forever with empty pages is cut off by the deadline of the
// listing's context).
func collect[T any](seq func(func(*T, error) bool), limit int) ([]*T, error) {
	var out []*T
	var err error
	seq(func(v *T, e error) bool {
		if e != nil {
			err = e
			return false
		}
		out = append(out, v)
		return len(out) < limit
	})
	return out, err
}

// build makes the catalog's tools of the server from what it lists: its tools that
// pass the allow and deny lists, with usable schemas, named "<server>__<tool>", then
// read_resource and list_resources when it has resources, and get_prompt when it
// has prompts. It returns them sorted by name, with why each left-out tool was.
func (s *server) build(remote []*sdk.Tool, hasResources bool, resources []*sdk.Resource, templates []*sdk.ResourceTemplate,
	hasPrompts bool, prompts []*sdk.Prompt) ([]tools.Tool, []string) {
	var out []tools.Tool
	var skipped []string
	names := map[string]string{} // exposed name -> the server's name for it
	// The parsers of the tools listed before, reused for a schema unchanged, so
	// that a listing again (a list_changed, a reconnection) resolves only the
	// schemas that are new.
	prior := map[string]*remoteTool{}
	s.mu.Lock()
	for _, t := range s.tools {
		if rt, ok := t.(*remoteTool); ok {
			prior[rt.spec.Name] = rt
		}
	}
	s.mu.Unlock()
	slices.SortFunc(remote, func(a, b *sdk.Tool) int { return strings.Compare(a.Name, b.Name) })
	for _, t := range remote {
		if t == nil || !s.cfg.allowed(t.Name) {
			continue
		}
		if len(out) >= s.c.cfg.MaxTools {
			skipped = append(skipped, fmt.Sprintf("the server offers more than %d tools: %q and the ones after it (by name) are left out", s.c.cfg.MaxTools, clipName(t.Name)))
			break
		}
		if s.taskOnly.required(t.Name) {
			skipped = append(skipped, fmt.Sprintf("tool %q: the server runs it only as a task (execution.taskSupport \"required\"), and the node calls no tool as a task", clipName(t.Name)))
			continue
		}
		schema, err := objectSchema(t.InputSchema)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("tool %q: %v", clipName(t.Name), err))
			continue
		}
		name := exposedName(s.name, t.Name)
		if other, dup := names[name]; dup {
			skipped = append(skipped, fmt.Sprintf("tool %q: its name becomes %q, as %q's does", clipName(t.Name), name, clipName(other)))
			continue
		}
		// A schema the parser refuses (a type JSON Schema does not have, $refs
		// that go round or lead nowhere) leaves the tool out, as tools.NewRegistry
		// refuses one: the node could not check a model's arguments against it, and
		// a provider that checks the schemas it is sent would refuse every request
		// that offered it.
		var parser *tools.ArgumentParser
		if p := prior[name]; p != nil && bytes.Equal(p.spec.Parameters, schema) {
			parser = p.parser
		} else if parser, err = tools.NewArgumentParser(name, schema, 0); err != nil {
			skipped = append(skipped, fmt.Sprintf("tool %q: its input schema is not one the node can check arguments against: %v", clipName(t.Name), err))
			continue
		}
		names[name] = t.Name
		desc := t.Description
		if desc == "" {
			desc = t.Title
		}
		resend := t.Annotations != nil && (t.Annotations.IdempotentHint || t.Annotations.ReadOnlyHint)
		out = append(out, &remoteTool{srv: s, remote: t.Name, resend: resend, parser: parser,
			spec: messages.ToolSpec{Name: name, Description: clipDescription(desc), Parameters: schema}})
	}
	pseudo := func(short string, make func(name string) tools.Tool) {
		if !s.cfg.allowed(short) {
			return
		}
		name := s.name + Separator + short
		if other, dup := names[name]; dup {
			skipped = append(skipped, fmt.Sprintf("%s: the server has a tool %q of that name; it is kept instead", short, clipName(other)))
			return
		}
		names[name] = short
		out = append(out, make(name))
	}
	if hasResources {
		pseudo(ReadResource, func(name string) tools.Tool {
			return &resourceReader{srv: s, spec: messages.ToolSpec{Name: name,
				Description: fmt.Sprintf("Read a resource of the MCP server %q by its URI.%s", s.name, describeResources(s.name, resources, templates)),
				Parameters:  json.RawMessage(`{"properties":{"uri":{"description":"the resource's URI","type":"string"}},"required":["uri"],"type":"object"}`)}}
		})
		pseudo(ListResources, func(name string) tools.Tool {
			return &resourceLister{srv: s, spec: messages.ToolSpec{Name: name,
				Description: fmt.Sprintf("List the resources and resource templates of the MCP server %q (URI, name, type, description).", s.name),
				Parameters:  json.RawMessage(`{"properties":{},"type":"object"}`)}}
		})
	}
	if hasPrompts {
		pseudo(GetPrompt, func(name string) tools.Tool {
			return &promptGetter{srv: s, spec: messages.ToolSpec{Name: name,
				Description: fmt.Sprintf("Get a prompt of the MCP server %q by name, with its arguments: the messages it makes.%s", s.name, describePrompts(prompts)),
				Parameters: json.RawMessage(`{"properties":{"arguments":{"additionalProperties":{"type":"string"},"description":"the prompt's arguments, by name","type":"object"},` +
					`"name":{"description":"the prompt's name","type":"string"}},"required":["name"],"type":"object"}`)}}
		})
	}
	slices.SortFunc(out, func(a, b tools.Tool) int { return strings.Compare(a.Spec().Name, b.Spec().Name) })
	return out, skipped
}

// exposedName is the catalog's name of a server's tool: "<server>__<tool>", with
// every character a model API refuses replaced by '_', and a name longer than 64
// characters cut and ended with a hash of the whole, so that it stays unique.
func exposedName(server, tool string) string {
	b := []byte(server + Separator)
	for _, c := range []byte(tool) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b = append(b, c)
		} else {
			b = append(b, '_')
		}
	}
	if len(b) <= maxNameLen && len(tool) > 0 {
		return string(b)
	}
	h := fnv.New32a()
	h.Write([]byte(tool))
	sum := fmt.Sprintf("_%08x", h.Sum32())
	return string(b[:min(len(b), maxNameLen-len(sum))]) + sum
}

// objectSchema checks that a tool's input schema is a JSON Schema for an object (a
// JSON object whose "type", if any, is "object"), at most 64 KiB, and returns it
// canonical: keys sorted, compact, "type":"object" added when absent. The same
// schema from the server gives the same bytes, whatever order it wrote the keys in.
func objectSchema(v any) (json.RawMessage, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("its input schema is not JSON: %w", err)
	}
	if len(raw) > maxSchemaBytes {
		return nil, fmt.Errorf("its input schema is %d bytes; the limit is %d", len(raw), maxSchemaBytes)
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil || m == nil {
		return nil, fmt.Errorf("its input schema %s is not a JSON Schema object: want {\"type\":\"object\",...}", clip(raw))
	}
	switch t := m["type"].(type) {
	case nil:
		m["type"] = "object"
	case string:
		if t != "object" {
			return nil, fmt.Errorf("its input schema has type %q: tool arguments are an object, want \"type\":\"object\"", t)
		}
	default:
		return nil, fmt.Errorf("its input schema's type %s is not \"object\"", clip(mustJSON(t)))
	}
	return compactJSON(m)
}

func compactJSON(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func clip(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "…"
	}
	return string(b)
}

func clipName(s string) string {
	if len(s) > 80 {
		return cutUTF8(s, 80) + "…"
	}
	return s
}

func clipDescription(s string) string {
	if len(s) <= maxDescription {
		return s
	}
	return cutUTF8(s, maxDescription-len(descriptionCutSfx)) + descriptionCutSfx
}

// cutUTF8 returns at most n bytes of s, not splitting a character.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func describeResources(server string, resources []*sdk.Resource, templates []*sdk.ResourceTemplate) string {
	var b strings.Builder
	listed := 0
	for _, r := range resources {
		if r == nil {
			continue
		}
		line := "\n- " + r.URI
		if r.Name != "" && r.Name != r.URI {
			line += " (" + r.Name + ")"
		}
		if b.Len()+len(line) > maxListedInDoc {
			break
		}
		b.WriteString(line)
		listed++
	}
	for _, t := range templates {
		if t == nil {
			continue
		}
		line := "\n- template " + t.URITemplate
		if b.Len()+len(line) > maxListedInDoc {
			break
		}
		b.WriteString(line)
		listed++
	}
	total := len(resources) + len(templates)
	if total == 0 {
		return ""
	}
	head := "\nResources:"
	if listed < total {
		head = fmt.Sprintf("\nResources (%d of %d; %s%s%s lists them all):", listed, total, server, Separator, ListResources)
	}
	return head + b.String()
}

func describePrompts(prompts []*sdk.Prompt) string {
	var b strings.Builder
	listed := 0
	for _, p := range prompts {
		if p == nil {
			continue
		}
		line := "\n- " + p.Name
		var args []string
		for _, a := range p.Arguments {
			if a == nil {
				continue
			}
			if a.Required {
				args = append(args, a.Name+" (required)")
			} else {
				args = append(args, a.Name)
			}
		}
		if len(args) > 0 {
			line += ": arguments " + strings.Join(args, ", ")
		}
		if p.Description != "" {
			line += " — " + cutUTF8(p.Description, 200)
		}
		if b.Len()+len(line) > maxListedInDoc {
			break
		}
		b.WriteString(line)
		listed++
	}
	if len(prompts) == 0 {
		return ""
	}
	if listed < len(prompts) {
		return fmt.Sprintf("\nPrompts (%d of %d):%s", listed, len(prompts), b.String())
	}
	return "\nPrompts:" + b.String()
}

// remoteTool is one tool of a server, in the catalog.
type remoteTool struct {
	srv    *server
	remote string // the server's name for it
	spec   messages.ToolSpec
	// resend says that the call may be sent again when the connection broke after
	// it went out: the server marks the tool idempotentHint or readOnlyHint.
	resend bool
	// parser reads the model's arguments for the tool's schema as a built-in's
	// are read: key=value pairs and coercible values ("3" for an integer) are
	// accepted, and a key written twice, a wrong type, a missing or unknown field
	// are refused before the call goes out. A tool whose schema the parser
	// refuses is not offered (build).
	parser *tools.ArgumentParser
}

func (t *remoteTool) Spec() messages.ToolSpec { return t.spec }

// Limits bounds the output at the client's MaxResultBytes (server.limits).
func (t *remoteTool) Limits() tools.CallLimits { return t.srv.limits() }

// Source says where the tool comes from: "mcp:<server>".
func (t *remoteTool) Source() string { return t.srv.source }

// Call calls the tool on the server, with the call's idempotency key in the
// request's _meta (IdempotencyKeyMeta), once its arguments are read for its
// schema (remoteTool.parser). The result's content becomes text (images,
// audio and binary resources are described, not included) cut at MaxResultBytes; a
// result marked isError is returned as an error with that text.
func (t *remoteTool) Call(ctx context.Context, c tools.Call) (string, error) {
	// Checked and coerced only (tools.ArgumentParser.Check): the server reads
	// them itself, so no default is filled in (a default state=open would
	// reopen a closed issue), a null stays (a field cleared on purpose), and
	// numbers keep the digits the model wrote.
	args, err := t.parser.Check(c.Arguments)
	if err != nil {
		return "", err
	}
	params := &sdk.CallToolParams{Name: t.remote, Arguments: args}
	if k := c.OutwardKey(); k != "" {
		// Unique across event logs (tools.Call.Outward): a server that dedupes by
		// the key does not answer another deployment's call of the same session
		// name and seq with this one's result.
		params.Meta = sdk.Meta{IdempotencyKeyMeta: k}
	}
	// A call whose connection broke is sent again to the server started anew only
	// when it did not go out (a stdio server that died while idle), or when its tool
	// says a second call does no more than the first: one that went out may have
	// been performed, and few servers read the key (ErrOutcomeUnknown).
	var sent func() bool
	if c.Key != "" {
		ctx = context.WithValue(ctx, callKeyCtx{}, c.Key) // for stdioConn.Write
		t.srv.sent.take(c.Key)                            // an earlier attempt's (the call resumed after a restart)
		defer t.srv.sent.take(c.Key)
		if !t.resend {
			sent = func() bool { return t.srv.sent.take(c.Key) }
		}
	}
	var res *sdk.CallToolResult
	noticed := t.srv.noticedCount()
	err = t.srv.doOnce(ctx, func(cs *sdk.ClientSession) error {
		var err error
		res, err = cs.CallTool(ctx, params)
		return err
	}, sent)
	if err == nil {
		// A tool that changed the server's tools (a toolset it enabled) said so
		// before it answered: its result comes with the new list in the catalog.
		t.srv.awaitListing(ctx, noticed)
	}
	if err != nil {
		return "", fmt.Errorf("mcp server %q, tool %q: %w", t.srv.name, t.remote, err)
	}
	text := t.srv.c.cut(renderContent(res.Content, res.StructuredContent))
	if res.IsError {
		return "", fmt.Errorf("mcp server %q, tool %q: %w: %s", t.srv.name, t.remote, ErrToolError, text)
	}
	return text, nil
}

// ErrToolError wraps the error of a tool whose result the server marked isError.
var ErrToolError = errors.New("the tool reported an error")

// renderContent turns a result's content into text for the model.
func renderContent(content []sdk.Content, structured any) string {
	var parts []string
	for _, c := range content {
		switch c := c.(type) {
		case *sdk.TextContent:
			parts = append(parts, c.Text)
		case *sdk.ImageContent:
			parts = append(parts, fmt.Sprintf("[image: %s, %d bytes, not shown]", c.MIMEType, len(c.Data)))
		case *sdk.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio: %s, %d bytes, not shown]", c.MIMEType, len(c.Data)))
		case *sdk.ResourceLink:
			s := "[resource " + c.URI
			if c.Name != "" {
				s += " (" + c.Name + ")"
			}
			if c.Description != "" {
				s += ": " + c.Description
			}
			parts = append(parts, s+"]")
		case *sdk.EmbeddedResource:
			parts = append(parts, renderResource(c.Resource))
		case nil:
		default:
			parts = append(parts, fmt.Sprintf("[%T content, not shown]", c))
		}
	}
	if len(parts) == 0 && structured != nil {
		if b, err := compactJSON(structured); err == nil {
			return string(b)
		}
	}
	return strings.Join(parts, "\n")
}

func renderResource(r *sdk.ResourceContents) string {
	switch {
	case r == nil:
		return "[empty resource]"
	case r.Blob != nil && textMIME(r.MIMEType) && utf8.Valid(r.Blob):
		// A blob of a text type (server-everything serves its "blob" resources as
		// text/plain) is text the model can read.
		return string(r.Blob)
	case r.Blob != nil:
		return fmt.Sprintf("[resource %s: %d bytes of %s, not shown]", r.URI, len(r.Blob), orDefault(r.MIMEType, "binary data"))
	default:
		return r.Text
	}
}

// textMIME reports whether a media type (its parameters aside) is text: text/*,
// JSON, XML, YAML, TOML.
func textMIME(mediaType string) bool {
	mt, _, err := mime.ParseMediaType(mediaType)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"), strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"), strings.HasSuffix(mt, "+yaml"):
		return true
	}
	switch mt {
	case "application/json", "application/xml", "application/yaml", "application/x-yaml", "application/toml", "application/x-ndjson":
		return true
	}
	return false
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// cutRoom is what a result cut at MaxResultBytes may add to it: the note saying
// how much was cut, and the words of an error ("mcp server …, tool …: the tool
// reported an error: ").
const cutRoom = 1 << 10

// limits are the call limits of the server's tools: their output is bounded by
// the client's own cut (MaxResultBytes), not by the 64 KiB default of a tool's
// output, which would cut the cut text again and say that the result was as long
// as what the client kept.
func (s *server) limits() tools.CallLimits {
	return tools.CallLimits{MaxOutput: s.c.cfg.MaxResultBytes + cutRoom}
}

// cut bounds a result handed to the model at MaxResultBytes: the head, and a note
// saying how much was cut.
func (c *Client) cut(s string) string {
	limit := c.cfg.MaxResultBytes
	if len(s) <= limit {
		return s
	}
	head := cutUTF8(s, limit)
	return fmt.Sprintf("%s\n[cut: the result is %d bytes; the first %d are shown]", head, len(s), len(head))
}

// resourceReader is "<server>__read_resource".
type resourceReader struct {
	srv  *server
	spec messages.ToolSpec
}

func (t *resourceReader) Spec() messages.ToolSpec  { return t.spec }
func (t *resourceReader) Limits() tools.CallLimits { return t.srv.limits() }
func (t *resourceReader) Source() string           { return t.srv.source }

func (t *resourceReader) Call(ctx context.Context, c tools.Call) (string, error) {
	var args struct {
		URI string `json:"uri"`
	}
	if err := decodeStrict(t.spec.Name, c.Arguments, &args, `{"uri":"file:///notes.txt"}`); err != nil {
		return "", err
	}
	if args.URI == "" {
		return "", &tools.ArgumentError{Tool: t.spec.Name, Reason: `"uri" is required: the URI of a resource, e.g. {"uri":"file:///notes.txt"}`}
	}
	var res *sdk.ReadResourceResult
	err := t.srv.do(ctx, func(cs *sdk.ClientSession) error {
		var err error
		res, err = cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: args.URI})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("mcp server %q: read resource %q: %w", t.srv.name, args.URI, err)
	}
	var parts []string
	for _, r := range res.Contents {
		parts = append(parts, renderResource(r))
	}
	return t.srv.c.cut(strings.Join(parts, "\n")), nil
}

// resourceLister is "<server>__list_resources".
type resourceLister struct {
	srv  *server
	spec messages.ToolSpec
}

func (t *resourceLister) Spec() messages.ToolSpec  { return t.spec }
func (t *resourceLister) Limits() tools.CallLimits { return t.srv.limits() }
func (t *resourceLister) Source() string           { return t.srv.source }

func (t *resourceLister) Call(ctx context.Context, c tools.Call) (string, error) {
	var none struct{}
	if err := decodeStrict(t.spec.Name, c.Arguments, &none, `{}`); err != nil {
		return "", err
	}
	var b strings.Builder
	err := t.srv.do(ctx, func(cs *sdk.ClientSession) error {
		b.Reset()
		resources, err := collect(cs.Resources(ctx, nil), maxListedItems)
		if err != nil {
			return err
		}
		for _, r := range resources {
			fmt.Fprintf(&b, "%s\t%s\t%s\t%s\n", r.URI, r.Name, r.MIMEType, r.Description)
		}
		templates, _ := collect(cs.ResourceTemplates(ctx, nil), maxListedItems)
		for _, r := range templates {
			fmt.Fprintf(&b, "template %s\t%s\t%s\t%s\n", r.URITemplate, r.Name, r.MIMEType, r.Description)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("mcp server %q: list resources: %w", t.srv.name, err)
	}
	return t.srv.c.cut(b.String()), nil
}

// promptGetter is "<server>__get_prompt".
type promptGetter struct {
	srv  *server
	spec messages.ToolSpec
}

func (t *promptGetter) Spec() messages.ToolSpec  { return t.spec }
func (t *promptGetter) Limits() tools.CallLimits { return t.srv.limits() }
func (t *promptGetter) Source() string           { return t.srv.source }

func (t *promptGetter) Call(ctx context.Context, c tools.Call) (string, error) {
	var args struct {
		Name      string            `json:"name"`
		Arguments map[string]string `json:"arguments"`
	}
	if err := decodeStrict(t.spec.Name, c.Arguments, &args, `{"name":"summarize","arguments":{"topic":"MCP"}}`); err != nil {
		return "", err
	}
	if args.Name == "" {
		return "", &tools.ArgumentError{Tool: t.spec.Name, Reason: `"name" is required: the prompt's name`}
	}
	var res *sdk.GetPromptResult
	err := t.srv.do(ctx, func(cs *sdk.ClientSession) error {
		var err error
		res, err = cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: args.Name, Arguments: args.Arguments})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("mcp server %q: get prompt %q: %w", t.srv.name, args.Name, err)
	}
	var b strings.Builder
	if res.Description != "" {
		b.WriteString(res.Description + "\n")
	}
	for _, m := range res.Messages {
		if m == nil {
			continue
		}
		fmt.Fprintf(&b, "%s: %s\n", m.Role, renderContent([]sdk.Content{m.Content}, nil))
	}
	return t.srv.c.cut(strings.TrimSuffix(b.String(), "\n")), nil
}

// decodeStrict decodes a model's arguments into v: one JSON object with only v's
// fields (empty text is {}).
func decodeStrict(tool, raw string, v any, example string) error {
	t := strings.TrimSpace(raw)
	if t == "" || t == "null" {
		t = "{}"
	}
	fail := func(reason string) error {
		return &tools.ArgumentError{Tool: tool, Reason: reason + "; expected a JSON object such as " + example}
	}
	if t[0] != '{' {
		return fail("arguments are not a JSON object")
	}
	if k, want, ok := miscasedMember(t, v); ok {
		return fail(fmt.Sprintf("member %q: the name is %q", k, want))
	}
	d := json.NewDecoder(strings.NewReader(t))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return fail(fmt.Sprintf("field %q must be %s, not a JSON %s", typeErr.Field, jsonKind(typeErr.Type), typeErr.Value))
		}
		return fail(strings.TrimPrefix(err.Error(), "json: "))
	}
	if d.More() {
		return fail("unexpected text after the JSON object")
	}
	return nil
}

// miscasedMember returns a member of the JSON object raw whose name is a field's
// of the struct v points to but for case ("Input" for "input"), and the field's
// name. encoding/json takes such a member for the field, the last one written
// winning, and DisallowUnknownFields lets it through: {"input":"a","Input":"b"}
// ran "b", which a client or gateway that read "input" never saw.
func miscasedMember(raw string, v any) (member, want string, ok bool) {
	typ := reflect.TypeOf(v)
	if typ == nil || typ.Kind() != reflect.Pointer || typ.Elem().Kind() != reflect.Struct {
		return "", "", false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(raw), &obj) != nil {
		return "", "", false // Decode says what is wrong
	}
	var names []string
	for f := range typ.Elem().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		if name != "-" && f.IsExported() {
			names = append(names, name)
		}
	}
	return jsonkeys.Miscased(obj, names)
}

// jsonKind names the JSON value that decodes into a Go value of type t.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}
