package mcp

import (
	"context"
	"reflect"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A Client is a Source: a Server offers the resources, resource templates and
// prompts of the client's MCP servers, so that the node's MCP clients (an IDE) see
// them through Troupe. Resources and templates keep their servers' URIs; a prompt
// is named "<server>__<prompt>", like a tool. Reads, prompts and subscriptions go
// to the server that offers them, through the client's connection. A server whose
// read_resource (or get_prompt) the configuration's allow and deny lists leave out
// offers no resources (or prompts).
var _ Source = (*Client)(nil)

// remoteOffer is what a server lists besides its tools.
type remoteOffer struct {
	resources []*sdk.Resource
	templates []*sdk.ResourceTemplate
	prompts   []*sdk.Prompt
	subscribe bool // the server takes resources/subscribe
	complete  bool // the server takes completion/complete
}

// setOffer keeps the server's listing and reports whether it changed. Call it with
// s.mu held.
func (s *server) setOffer(caps *sdk.ServerCapabilities, resources []*sdk.Resource, templates []*sdk.ResourceTemplate, prompts []*sdk.Prompt) bool {
	o := remoteOffer{subscribe: caps.Resources != nil && caps.Resources.Subscribe, complete: caps.Completions != nil}
	if s.cfg.allowed(ReadResource) {
		o.resources, o.templates = resources, templates
	}
	if s.cfg.allowed(GetPrompt) {
		o.prompts = prompts
	}
	changed := !reflect.DeepEqual(o, s.offer)
	s.offer = o
	return changed
}

// Offer returns the resources, templates and prompts the client's servers listed
// last (a server that is down keeps its last listing; reading it waits for the
// server like a tool call, or fails).
func (c *Client) Offer() Catalog {
	var out Catalog
	for _, s := range c.servers {
		s.mu.Lock()
		o := s.offer
		s.mu.Unlock()
		for _, r := range o.resources {
			if r == nil {
				continue
			}
			res := Resource{Resource: *r, Read: s.read}
			if o.subscribe {
				res.Watch = s.watch
			}
			out.Resources = append(out.Resources, res)
		}
		for _, t := range o.templates {
			if t == nil {
				continue
			}
			tmpl := ResourceTemplate{ResourceTemplate: *t,
				Read: func(ctx context.Context, uri string, _ map[string]string) ([]*sdk.ResourceContents, error) {
					return s.read(ctx, uri)
				}}
			if o.subscribe {
				tmpl.Watch = s.watch
			}
			if o.complete {
				tmpl.Complete = s.complete
			}
			out.Templates = append(out.Templates, tmpl)
		}
		for _, p := range o.prompts {
			if p == nil {
				continue
			}
			meta := *p
			remote := p.Name
			meta.Name = exposedName(s.name, remote)
			var complete func(context.Context, *sdk.CompleteParams) (*sdk.CompleteResult, error)
			if o.complete {
				complete = func(ctx context.Context, p *sdk.CompleteParams) (*sdk.CompleteResult, error) {
					c := *p
					c.Ref = &sdk.CompleteReference{Type: "ref/prompt", Name: remote}
					return s.complete(ctx, &c)
				}
			}
			out.Prompts = append(out.Prompts, Prompt{Prompt: meta, Complete: complete,
				Get: func(ctx context.Context, args map[string]string) (*sdk.GetPromptResult, error) {
					var res *sdk.GetPromptResult
					err := s.do(ctx, func(cs *sdk.ClientSession) error {
						var err error
						res, err = cs.GetPrompt(ctx, &sdk.GetPromptParams{Name: remote, Arguments: args})
						return err
					})
					return res, err
				}})
		}
	}
	return out
}

// read reads uri on the server.
func (s *server) read(ctx context.Context, uri string) ([]*sdk.ResourceContents, error) {
	var res *sdk.ReadResourceResult
	err := s.do(ctx, func(cs *sdk.ClientSession) error {
		var err error
		res, err = cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: uri})
		return err
	})
	if err != nil {
		return nil, err
	}
	return res.Contents, nil
}

// complete asks the server to complete an argument of its prompt or template.
func (s *server) complete(ctx context.Context, p *sdk.CompleteParams) (*sdk.CompleteResult, error) {
	var res *sdk.CompleteResult
	err := s.do(ctx, func(cs *sdk.ClientSession) error {
		var err error
		res, err = cs.Complete(ctx, p)
		return err
	})
	return res, err
}

// watch subscribes to uri on the server, or unsubscribes.
func (s *server) watch(ctx context.Context, uri string, on bool) error {
	return s.do(ctx, func(cs *sdk.ClientSession) error {
		if on {
			return cs.Subscribe(ctx, &sdk.SubscribeParams{URI: uri})
		}
		return cs.Unsubscribe(ctx, &sdk.UnsubscribeParams{URI: uri})
	})
}

// OnUpdated registers f, called with the URI of a resource its server says changed
// (notifications/resources/updated, after a subscription through Watch).
func (c *Client) OnUpdated(f func(ctx context.Context, uri string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.updated = append(c.updated, f)
}

func (c *Client) tellUpdated(ctx context.Context, uri string) {
	c.mu.Lock()
	fs := c.updated
	c.mu.Unlock()
	for _, f := range fs {
		f(ctx, uri)
	}
}
