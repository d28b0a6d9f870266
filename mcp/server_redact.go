package mcp

import (
	"errors"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/node"
)

// redacting is a Node that removes its secrets from a text about to leave it
// (*node.Node does: its Config.Secrets and Redactor). The server passes what it
// answers of its sources through it: a resource read and a prompt got from an MCP
// server the node is a client of (whose get-env-like resource may hold the
// node's tokens), from a skill or from the configuration, their errors, and the
// values a source completes; a tool's answer is redacted by Node.CallTool.
type redacting interface {
	Redact(s string) string
}

var _ redacting = (*node.Node)(nil)

// redact is s with the node's secrets removed; s itself when the Node redacts
// nothing.
func (s *Server) redact(str string) string {
	if r, ok := s.n.(redacting); ok {
		return r.Redact(str)
	}
	return str
}

// redactContents returns contents with the node's secrets removed from their
// texts, and from their blobs that are UTF-8 text (a binary blob, an image, is
// left whole: a replacement would corrupt it). contents is not modified (a source
// may answer the same values at each read).
func (s *Server) redactContents(contents []*sdk.ResourceContents) []*sdk.ResourceContents {
	out := make([]*sdk.ResourceContents, len(contents))
	for i, c := range contents {
		if c == nil {
			continue
		}
		r := *c
		r.Text = s.redact(c.Text)
		if len(c.Blob) > 0 && utf8.Valid(c.Blob) {
			if b := s.redact(string(c.Blob)); b != string(c.Blob) {
				r.Blob = []byte(b)
			}
		}
		out[i] = &r
	}
	return out
}

// redactPrompt returns res with the node's secrets removed from its description
// and its messages' texts, embedded resources and resource links; res is not
// modified.
func (s *Server) redactPrompt(res *sdk.GetPromptResult) *sdk.GetPromptResult {
	if res == nil {
		return nil
	}
	out := *res
	out.Description = s.redact(res.Description)
	out.Messages = make([]*sdk.PromptMessage, len(res.Messages))
	for i, m := range res.Messages {
		if m == nil {
			continue
		}
		pm := *m
		switch c := m.Content.(type) {
		case *sdk.TextContent:
			t := *c
			t.Text = s.redact(c.Text)
			pm.Content = &t
		case *sdk.EmbeddedResource:
			e := *c
			if c.Resource != nil {
				e.Resource = s.redactContents([]*sdk.ResourceContents{c.Resource})[0]
			}
			pm.Content = &e
		case *sdk.ResourceLink:
			l := *c
			l.URI, l.Title, l.Description = s.redact(c.URI), s.redact(c.Title), s.redact(c.Description)
			pm.Content = &l
		}
		out.Messages[i] = &pm
	}
	return &out
}

// redactErr returns err with the node's secrets removed from its message (and
// from a JSON-RPC error's data, whose code it keeps).
func (s *Server) redactErr(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	var w *jsonrpc.Error
	if errors.As(err, &w) {
		data := w.Data
		if len(data) > 0 {
			data = []byte(s.redact(string(data)))
		}
		if red := s.redact(msg); red != msg || string(data) != string(w.Data) {
			return &jsonrpc.Error{Code: w.Code, Message: red, Data: data}
		}
		return err
	}
	if red := s.redact(msg); red != msg {
		return errors.New(red)
	}
	return err
}
