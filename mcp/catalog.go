package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"
)

// The marks of a Source's errors (a Read's, a Get's, a Complete's) that tell the
// server the code of the JSON-RPC error its client gets (rpcError): the MCP
// specification answers a resource not found (SEP-2164), a prompt unknown and a
// required argument missing with Invalid params (-32602). Any other error is an
// internal error (-32603); the go-sdk alone sends a Go error with code 0, no
// JSON-RPC code.
var (
	// ErrNotFound marks the error of a resource or prompt that is not there (a
	// skill's file, a skill): Invalid params, with the URI in the error's data for
	// a resource, as sdk.ResourceNotFoundError has it.
	ErrNotFound = errors.New("not found")
	// ErrInvalidParams marks the refusal of a request's parameters (a path out of
	// a skill's folder, a missing argument): Invalid params.
	ErrInvalidParams = errors.New("invalid params")
)

// markedError is err marked with one of the marks above, its message err's.
type markedError struct{ err, mark error }

func (e markedError) Error() string   { return e.err.Error() }
func (e markedError) Unwrap() []error { return []error{e.err, e.mark} }

// mark returns err marked with mark (ErrNotFound, ErrInvalidParams), its message
// unchanged; nil stays nil.
func mark(err, mark error) error {
	if err == nil {
		return nil
	}
	return markedError{err, mark}
}

// rpcError is the JSON-RPC error a request answers for err, an error of a Source
// or of the server's own checks, with the code the MCP specification gives it:
// Invalid params (-32602) for one marked ErrNotFound (with {"uri": uri} as its
// data when uri is not empty) or ErrInvalidParams; the code of a JSON-RPC error
// (a proxied server's answer, sdk.ResourceNotFoundError), Invalid params for its
// legacy resource not found (-32002); Internal error (-32603)
// for any other, a JSON-RPC error of code 0 included. Its message is err's, the
// node's secrets redacted.
func (s *Server) rpcError(err error, uri string) error {
	var w *jsonrpc.Error
	e := &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
	switch {
	case errors.Is(err, ErrNotFound):
		e.Code = jsonrpc.CodeInvalidParams
		if uri != "" {
			e.Data, _ = json.Marshal(map[string]string{"uri": uri})
		}
	case errors.Is(err, ErrInvalidParams):
		e.Code = jsonrpc.CodeInvalidParams
	case errors.As(err, &w) && w.Code == codeLegacyResourceNotFound:
		e.Code, e.Data = jsonrpc.CodeInvalidParams, w.Data
	case errors.As(err, &w) && w.Code != 0:
		e.Code, e.Data = w.Code, w.Data
	}
	return s.redactErr(e)
}

// legacyNotFound answers a resources/read or resources/subscribe of a resource
// not found with the code of the client's protocol version: Invalid params
// (-32602, with {"uri": …} in data) from 2026-07-28 on (SEP-2164 made it a MUST),
// and the legacy -32002 to a client of an earlier version, whose specification
// (2024-11-05 to 2025-11-25) gives it that code and which may test for it. The
// refusal is the go-sdk's (sdk.ResourceNotFoundError, of a URI no resource or
// template matches) or rpcError's; the go-sdk itself answers -32602 to every
// version (MCPGODEBUG=customresnotfounderrcode=1 makes it -32002 to all). It is
// told from other refusals of the parameters by the URI in its data (a proxied
// server's names its own). A request of no known version is answered as the
// current one.
func legacyNotFound(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		res, err := next(ctx, method, req)
		if err == nil || (method != "resources/read" && method != "resources/subscribe") {
			return res, err
		}
		v, ok := req.(interface{ ProtocolVersion() string })
		var e *jsonrpc.Error
		if !ok || v.ProtocolVersion() == "" || v.ProtocolVersion() >= protocolSEP2164 ||
			!errors.As(err, &e) || e.Code != jsonrpc.CodeInvalidParams || len(e.Data) == 0 {
			return res, err
		}
		var data struct {
			URI *string `json:"uri"`
		}
		if json.Unmarshal(e.Data, &data) != nil || data.URI == nil {
			return res, err // another refusal of the request's parameters (no URI in data)
		}
		return res, &jsonrpc.Error{Code: codeLegacyResourceNotFound, Message: e.Message, Data: e.Data}
	}
}

// protocolSEP2164 is the first protocol version whose resource not found is
// Invalid params (-32602) rather than -32002.
const protocolSEP2164 = "2026-07-28"

// codeLegacyResourceNotFound is the code of a resource not found before SEP-2164
// (the 2025-11-25 specification's), which a proxied server may still answer: the
// node answers its clients Invalid params in its place, and legacyNotFound the
// legacy code again to a client of a version before 2026-07-28.
const codeLegacyResourceNotFound = -32002

// Resource is a resource the server offers: what resources/list says of it, and
// how to read it.
type Resource struct {
	sdk.Resource
	// Read returns the resource's contents (text, or a blob) now. Its error
	// answers the client (rpcError): one marked ErrNotFound or ErrInvalidParams
	// as Invalid params, a JSON-RPC error with its code, any other as an internal
	// error.
	Read func(ctx context.Context, uri string) ([]*sdk.ResourceContents, error)
	// Watch, when set, asks the source to tell of changes to uri (on) or to stop
	// (not on): the first session's resources/subscribe to uri turns it on, and it
	// is turned off when no session is subscribed any more (one that ends without
	// unsubscribing is noticed as it ends). The source tells of a change through
	// Server.ResourceUpdated (an UpdatingSource's is wired by the server). Without
	// Watch, a subscription is accepted and no update comes: the resource does not
	// change while the server runs.
	Watch func(ctx context.Context, uri string, on bool) error
}

// ResourceTemplate is a family of resources named by a URI template (RFC 6570,
// e.g. "test://template/{id}/data"): Read gets the URI asked for and the values of
// the template's variables in it.
type ResourceTemplate struct {
	sdk.ResourceTemplate
	Read func(ctx context.Context, uri string, vars map[string]string) ([]*sdk.ResourceContents, error)
	// Watch is Resource.Watch, for the URIs that match the template.
	Watch func(ctx context.Context, uri string, on bool) error
	// Complete, when set, answers completion/complete for one of the template's
	// variables (an MCP server's template: the request goes to it).
	Complete func(ctx context.Context, params *sdk.CompleteParams) (*sdk.CompleteResult, error)
}

// Prompt is a prompt the server offers: what prompts/list says of it, and how to
// make its messages from the client's arguments.
type Prompt struct {
	sdk.Prompt
	// Values, by argument name, are the values an argument takes:
	// completion/complete offers those that start with what the user typed.
	Values map[string][]string
	// Get returns the prompt's messages for args; the required arguments are
	// present (the server checks them first).
	Get func(ctx context.Context, args map[string]string) (*sdk.GetPromptResult, error)
	// Complete, when set, answers completion/complete for one of its arguments
	// instead of Values (an MCP server's prompt: the request goes to it, under
	// the prompt's name there).
	Complete func(ctx context.Context, params *sdk.CompleteParams) (*sdk.CompleteResult, error)
}

// Catalog is a set of resources, resource templates and prompts. It is itself a
// Source that never changes.
type Catalog struct {
	Resources []Resource
	Templates []ResourceTemplate
	Prompts   []Prompt
}

// Offer returns c.
func (c Catalog) Offer() Catalog { return c }

// Source offers resources and prompts to a Server: the node's skills (SkillSource),
// the MCP servers the node is a client of (Client), or a fixed Catalog. Offer is
// called again at each change (ServerOptions.Changed), and must be safe for
// concurrent use.
type Source interface {
	Offer() Catalog
}

var _ Source = Catalog{}

// UpdatingSource is a Source that tells of changes to its resources' contents:
// the server registers its ResourceUpdated with OnUpdated (a Client is one).
type UpdatingSource interface {
	Source
	OnUpdated(f func(ctx context.Context, uri string))
}

var _ UpdatingSource = (*Client)(nil)

// TextContents is the contents of a text resource.
func TextContents(uri, mimeType, text string) []*sdk.ResourceContents {
	return []*sdk.ResourceContents{{URI: uri, MIMEType: mimeType, Text: text}}
}

// BlobContents is the contents of a binary resource.
func BlobContents(uri, mimeType string, blob []byte) []*sdk.ResourceContents {
	return []*sdk.ResourceContents{{URI: uri, MIMEType: mimeType, Blob: blob}}
}

// offered is what the server offers now of its sources, with the templates
// parsed.
type offered struct {
	resources map[string]Resource
	templates map[string]ResourceTemplate
	parsed    map[string]*uritemplate.Template
	prompts   map[string]Prompt
}

// gather merges the sources' catalogs: a URI, template or prompt name offered
// twice is the first source's, and the others' are skipped with a warning.
func (s *Server) gather() offered {
	o := offered{resources: map[string]Resource{}, templates: map[string]ResourceTemplate{}, parsed: map[string]*uritemplate.Template{}, prompts: map[string]Prompt{}}
	warn := func(kind, name, why string) {
		s.opts.Logger.Warn("mcp server: "+kind+" not offered", kind, name, "why", why)
	}
	for _, src := range s.opts.Sources {
		c := src.Offer()
		for _, r := range c.Resources {
			u, err := url.Parse(r.URI)
			switch {
			case r.Read == nil || r.URI == "" || r.Name == "":
				warn("resource", r.URI, "it lacks a URI, a name or a Read")
			case err != nil || u.Scheme == "":
				warn("resource", r.URI, "its URI is not an absolute URI")
			case hasKey(o.resources, r.URI):
				warn("resource", r.URI, "another source offers that URI")
			default:
				o.resources[r.URI] = r
			}
		}
		for _, t := range c.Templates {
			parsed, err := uritemplate.New(t.URITemplate)
			switch {
			case t.Read == nil || t.Name == "":
				warn("resource template", t.URITemplate, "it lacks a name or a Read")
			case err != nil:
				warn("resource template", t.URITemplate, err.Error())
			case hasKey(o.templates, t.URITemplate):
				warn("resource template", t.URITemplate, "another source offers that template")
			default:
				o.templates[t.URITemplate] = t
				o.parsed[t.URITemplate] = parsed
			}
		}
		for _, p := range c.Prompts {
			switch {
			case p.Get == nil || p.Name == "":
				warn("prompt", p.Name, "it lacks a name or a Get")
			case hasKey(o.prompts, p.Name):
				warn("prompt", p.Name, "another source offers that name")
			default:
				o.prompts[p.Name] = p
			}
		}
	}
	return o
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

// syncCatalog offers the sources' resources, templates and prompts as they are
// now; the SDK announces each change to clients (…/list_changed). Call it with
// s.mu held.
func (s *Server) syncCatalog() {
	now := s.gather()
	old := s.offered
	syncKind(old.resources, now.resources,
		func(a, b Resource) bool { return reflect.DeepEqual(a.Resource, b.Resource) },
		s.srv.RemoveResources,
		func(_ string, r Resource) {
			meta := r.Resource
			s.srv.AddResource(&meta, s.readResource)
		})
	syncKind(old.templates, now.templates,
		func(a, b ResourceTemplate) bool { return reflect.DeepEqual(a.ResourceTemplate, b.ResourceTemplate) },
		s.srv.RemoveResourceTemplates,
		func(_ string, t ResourceTemplate) {
			meta := t.ResourceTemplate
			s.srv.AddResourceTemplate(&meta, s.readResource)
		})
	syncKind(old.prompts, now.prompts,
		func(a, b Prompt) bool { return reflect.DeepEqual(a.Prompt, b.Prompt) },
		s.srv.RemovePrompts,
		func(name string, p Prompt) {
			meta := p.Prompt
			s.srv.AddPrompt(&meta, s.getPrompt(name))
		})
	s.offered = now
}

// syncKind brings one kind of the offered catalog from old to now: the keys
// gone are removed in one call, in order, and each key new or changed (same
// tells) is added, in key order.
func syncKind[V any](old, now map[string]V, same func(a, b V) bool, remove func(...string), add func(key string, v V)) {
	var gone []string
	for key := range old {
		if !hasKey(now, key) {
			gone = append(gone, key)
		}
	}
	if len(gone) > 0 {
		slices.Sort(gone)
		remove(gone...)
	}
	for _, key := range sortedKeys(now) {
		v := now[key]
		if prev, ok := old[key]; !ok || !same(prev, v) {
			add(key, v)
		}
	}
}

// find returns the reader of uri and its watcher (nil when it has none): a
// resource's, or those of the first template (in the order of their text) that
// matches it.
func (s *Server) find(uri string) (read func(context.Context) ([]*sdk.ResourceContents, error), watch func(context.Context, string, bool) error, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.offered.resources[uri]; ok {
		return func(ctx context.Context) ([]*sdk.ResourceContents, error) { return r.Read(ctx, uri) }, r.Watch, true
	}
	for _, key := range sortedKeys(s.offered.templates) {
		values := s.offered.parsed[key].Match(uri)
		if values == nil {
			continue
		}
		vars := map[string]string{}
		for _, name := range s.offered.parsed[key].Varnames() {
			vars[name] = values.Get(name).String()
		}
		t := s.offered.templates[key]
		return func(ctx context.Context) ([]*sdk.ResourceContents, error) { return t.Read(ctx, uri, vars) }, t.Watch, true
	}
	return nil, nil, false
}

// readResource is the handler of every resource and template: it reads what the
// sources offer now.
func (s *Server) readResource(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	read, _, ok := s.find(uri)
	if !ok {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	contents, err := read(ctx)
	if err != nil {
		return nil, s.rpcError(err, uri)
	}
	// The contents leave the node: its secrets are redacted (an MCP server's
	// resource that shows its environment).
	contents = s.redactContents(contents)
	for _, c := range contents {
		if c != nil && c.URI == "" {
			c.URI = uri
		}
	}
	return &sdk.ReadResourceResult{Contents: contents}, nil
}

// subscribe accepts a subscription to a resource the server offers; the SDK keeps
// it, and ResourceUpdated tells the subscribers of a change. The first session to
// subscribe to a URI turns its source's Watch on.
func (s *Server) subscribe(ctx context.Context, req *sdk.SubscribeRequest) error {
	uri := req.Params.URI
	if len(uri) > maxSubscriptionURI {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("the URI is longer than %d bytes, the most the server subscribes to", maxSubscriptionURI)}
	}
	_, watch, ok := s.find(uri)
	if !ok {
		return sdk.ResourceNotFoundError(uri)
	}
	// Recorded first (and bounded: maxSubscriptions), so that a node that resumes
	// the session subscribes it again.
	if err := s.recordSubscribe(ctx, req.Session.ID(), uri); err != nil {
		return s.rpcError(err, "")
	}
	s.subMu.Lock()
	defer s.subMu.Unlock()
	s.pruneSubscriptions(ctx)
	if !s.subs[uri][req.Session] {
		// A session without an ID (over stdio) has no record: it is bounded here.
		held := 0
		for _, sessions := range s.subs {
			if sessions[req.Session] {
				held++
			}
		}
		if held >= maxSubscriptions {
			return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
				"too many subscriptions: this session has %d, the most the server keeps; unsubscribe from one first", held)}
		}
	}
	if len(s.subs[uri]) == 0 && watch != nil {
		if err := watch(ctx, uri, true); err != nil {
			if uerr := s.recordUnsubscribe(context.WithoutCancel(ctx), req.Session.ID(), uri); uerr != nil {
				s.opts.Logger.Warn("mcp server: a failed subscription stays recorded", "session", req.Session.ID(), "uri", uri, "err", uerr)
			}
			return s.rpcError(fmt.Errorf("subscribe to %s: %w", uri, err), uri)
		}
	}
	if s.subs[uri] == nil {
		s.subs[uri] = map[*sdk.ServerSession]bool{}
	}
	s.subs[uri][req.Session] = true
	if !s.awaited[req.Session] {
		s.awaited[req.Session] = true
		go s.forgetOnEnd(req.Session)
	}
	return nil
}

// forgetOnEnd waits for the end of ss, a session with a subscription, and then
// forgets its subscriptions, turning off the Watch of each URI it leaves without
// subscribers. A client that vanishes, a session that times out, is deleted or
// closed by capSessions, or a stdio client whose Serve returns, sends no
// unsubscribe (only one of protocol 2026-07-28, whose subscription is a request
// that the end cancels, has the SDK unsubscribe for it): without this the Watch
// would stay on until another session subscribed or unsubscribed, on a quiet
// server for ever. The log's record of the subscriptions stays, so that a client
// whose session resumes (after a restart, or capSessions) is subscribed again.
func (s *Server) forgetOnEnd(ss *sdk.ServerSession) {
	_ = ss.Wait()
	s.subMu.Lock()
	defer s.subMu.Unlock()
	delete(s.awaited, ss)
	for _, sessions := range s.subs {
		delete(sessions, ss) // the SDK may list ss a moment after Wait returns
	}
	s.pruneSubscriptions(context.Background())
}

// unsubscribe ends a session's subscription; when no session is left subscribed
// to the URI, its source's Watch is turned off.
func (s *Server) unsubscribe(ctx context.Context, req *sdk.UnsubscribeRequest) error {
	if err := s.recordUnsubscribe(ctx, req.Session.ID(), req.Params.URI); err != nil {
		return s.rpcError(err, "")
	}
	s.subMu.Lock()
	defer s.subMu.Unlock()
	if sessions := s.subs[req.Params.URI]; sessions != nil {
		delete(sessions, req.Session)
	}
	s.pruneSubscriptions(ctx)
	return nil
}

// unwatchTimeout bounds telling a source to stop watching a resource.
const unwatchTimeout = 10 * time.Second

// pruneSubscriptions forgets the subscriptions of sessions that ended without
// unsubscribing, and turns off the Watch of each URI left without subscribers.
// Call it with s.subMu held.
func (s *Server) pruneSubscriptions(ctx context.Context) {
	live := map[*sdk.ServerSession]bool{}
	for ss := range s.sdkSessions() {
		live[ss] = true
	}
	for uri, sessions := range s.subs {
		for ss := range sessions {
			if !live[ss] {
				delete(sessions, ss)
			}
		}
		if len(sessions) > 0 {
			continue
		}
		delete(s.subs, uri)
		if _, watch, ok := s.find(uri); ok && watch != nil {
			// The request may be over (a client's subscriptions/listen ends by
			// cancellation): the source is told anyway, within a bound.
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unwatchTimeout)
			err := watch(wctx, uri, false)
			cancel()
			if err != nil {
				s.opts.Logger.Warn("mcp server: unsubscribe from a source's resource failed", "uri", uri, "err", err)
			}
		}
	}
}

// ResourceUpdated tells the clients subscribed to uri that it changed.
func (s *Server) ResourceUpdated(ctx context.Context, uri string) error {
	return s.srv.ResourceUpdated(ctx, &sdk.ResourceUpdatedNotificationParams{URI: uri})
}

func (s *Server) getPrompt(name string) sdk.PromptHandler {
	return func(ctx context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
		s.mu.Lock()
		p, ok := s.offered.prompts[name]
		s.mu.Unlock()
		if !ok {
			return nil, s.rpcError(mark(fmt.Errorf("no prompt is named %q", name), ErrNotFound), "")
		}
		args := req.Params.Arguments
		if args == nil {
			args = map[string]string{}
		}
		var missing []string
		for _, a := range p.Arguments {
			if a.Required && args[a.Name] == "" {
				missing = append(missing, a.Name)
			}
		}
		if len(missing) > 0 {
			return nil, s.rpcError(mark(fmt.Errorf("prompt %s: missing required arguments: %s", name, strings.Join(missing, ", ")), ErrInvalidParams), "")
		}
		res, err := p.Get(context.WithValue(ctx, servingKey{}, s), args)
		if err != nil {
			return nil, s.rpcError(err, "")
		}
		// The messages leave the node: its secrets are redacted.
		return s.redactPrompt(res), nil
	}
}

type servingKey struct{}

// ReadOffered reads uri from the resources of the server that calls a Prompt's Get
// with ctx: a prompt can embed a resource the server offers (a skill's file, a
// proxied server's resource). Under another ctx it fails.
func ReadOffered(ctx context.Context, uri string) ([]*sdk.ResourceContents, error) {
	s, ok := ctx.Value(servingKey{}).(*Server)
	if !ok {
		return nil, fmt.Errorf("read %s: not within a prompts/get of a Server", uri)
	}
	read, _, ok := s.find(uri)
	if !ok {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	return read(ctx)
}

// maxCompletions is the most values completion/complete answers with (the spec's
// limit).
const maxCompletions = 100

// complete answers completion/complete for a prompt's argument from its declared
// Values, or from its source (Prompt.Complete); for a resource template's
// variable from its source (ResourceTemplate.Complete). Other references (and
// arguments without values) get no values.
func (s *Server) complete(ctx context.Context, req *sdk.CompleteRequest) (*sdk.CompleteResult, error) {
	res := &sdk.CompleteResult{Completion: sdk.CompletionResultDetails{Values: []string{}}}
	if req.Params == nil || req.Params.Ref == nil {
		return res, nil
	}
	if req.Params.Ref.Type == "ref/resource" {
		s.mu.Lock()
		t, ok := s.offered.templates[req.Params.Ref.URI]
		s.mu.Unlock()
		if !ok || t.Complete == nil {
			return res, nil
		}
		return s.completed(t.Complete(ctx, req.Params))
	}
	if req.Params.Ref.Type != "ref/prompt" {
		return res, nil
	}
	s.mu.Lock()
	p, ok := s.offered.prompts[req.Params.Ref.Name]
	s.mu.Unlock()
	if !ok {
		return nil, s.rpcError(mark(fmt.Errorf("no prompt is named %q", req.Params.Ref.Name), ErrNotFound), "")
	}
	if p.Complete != nil {
		return s.completed(p.Complete(ctx, req.Params))
	}
	var values []string
	for _, v := range p.Values[req.Params.Argument.Name] {
		if strings.HasPrefix(strings.ToLower(v), strings.ToLower(req.Params.Argument.Value)) {
			values = append(values, v)
		}
	}
	res.Completion.Total = len(values)
	if len(values) > maxCompletions {
		values, res.Completion.HasMore = values[:maxCompletions], true
	}
	res.Completion.Values = append(res.Completion.Values, values...)
	return res, nil
}

// completed is a source's answer to completion/complete, its values never null
// and at most maxCompletions, with the node's secrets redacted (the source is an
// MCP server).
func (s *Server) completed(res *sdk.CompleteResult, err error) (*sdk.CompleteResult, error) {
	if err != nil {
		return nil, s.rpcError(err, "")
	}
	if res == nil {
		res = &sdk.CompleteResult{}
	}
	if res.Completion.Values == nil {
		res.Completion.Values = []string{}
	}
	if len(res.Completion.Values) > maxCompletions {
		res.Completion.Values, res.Completion.HasMore = res.Completion.Values[:maxCompletions], true
	}
	values := make([]string, len(res.Completion.Values))
	for i, v := range res.Completion.Values {
		values[i] = s.redact(v)
	}
	res.Completion.Values = values
	return res, nil
}
