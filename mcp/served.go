package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"
)

// ServedConfig is what a node's MCP server offers besides the node's tools,
// run_task, its skills and its MCP servers' resources and prompts: fixed resources,
// resource templates and prompts declared in the node configuration's "mcp_server"
// object, how often a long call reports progress, how long a client that goes
// silent keeps its session, and how long a client whose stream was cut
// waits before it resumes it.
type ServedConfig struct {
	// ProgressInterval is ServerOptions.ProgressInterval, as a Go duration ("5s").
	ProgressInterval string           `json:"progress_interval,omitempty"`
	Resources        []ServedResource `json:"resources,omitempty"`
	Templates        []ServedTemplate `json:"resource_templates,omitempty"`
	Prompts          []ServedPrompt   `json:"prompts,omitempty"`
	// SessionTimeout is ServerOptions.SessionTimeout, as a Go duration ("30m").
	SessionTimeout string `json:"session_timeout,omitempty"`
	// ReconnectDelay is ServerOptions.ReconnectDelay, as a Go duration ("2s"):
	// the retry the server's streams name.
	ReconnectDelay string `json:"reconnect_delay,omitempty"`
	// MaxSessions is ServerOptions.MaxSessions (1 to MaxMaxSessions; default
	// DefaultMaxSessions).
	MaxSessions int `json:"max_sessions,omitempty"`
}

// MaxMaxSessions is the most ServedConfig.MaxSessions may be.
const MaxMaxSessions = 1_000_000

// ServedResource is a resource of fixed text, or of a file read at each read (a
// blob unless it is UTF-8 text of a text/… or no media type).
type ServedResource struct {
	URI         string `json:"uri"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	MIMEType    string `json:"mime_type,omitempty"`
	Text        string `json:"text,omitempty"`
	File        string `json:"file,omitempty"`
}

// ServedTemplate is a resource template (RFC 6570, "notes://{day}") whose
// contents are Text with each {variable} replaced by its value in the URI read.
type ServedTemplate struct {
	URITemplate string `json:"uri_template"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	MIMEType    string `json:"mime_type,omitempty"`
	Text        string `json:"text"`
}

// ServedPrompt is a prompt whose messages are texts with each {argument}
// replaced by the argument's value, images read from files, or resources the
// server offers (embedded, read when the prompt is got).
type ServedPrompt struct {
	Name        string           `json:"name"`
	Description string           `json:"description,omitempty"`
	Arguments   []ServedArgument `json:"arguments,omitempty"`
	Messages    []ServedMessage  `json:"messages"`
}

// ServedArgument is an argument of a prompt; Values, when given, are offered by
// completion/complete.
type ServedArgument struct {
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Required    bool     `json:"required,omitempty"`
	Values      []string `json:"values,omitempty"`
}

// ServedMessage is one message of a prompt: exactly one of Text, Image (a file;
// MIMEType says its type) or Resource (a URI, arguments replaced) is set. Role is
// "user" (the default) or "assistant".
type ServedMessage struct {
	Role     string `json:"role,omitempty"`
	Text     string `json:"text,omitempty"`
	Image    string `json:"image,omitempty"`
	MIMEType string `json:"mime_type,omitempty"`
	Resource string `json:"resource,omitempty"`
}

// maxServedFileBytes is the largest file a served resource or image reads.
const maxServedFileBytes = 4 << 20

// Validate checks c, naming fields under section (e.g. "mcp_server").
func (c ServedConfig) Validate(section string) error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", section, field, fmt.Sprintf(format, a...)))
	}
	if c.ProgressInterval != "" {
		if d, err := time.ParseDuration(c.ProgressInterval); err != nil || d < 10*time.Millisecond || d > time.Hour {
			bad("progress_interval", "%q is not a duration from 10ms to 1h, like \"5s\"", c.ProgressInterval)
		}
	}
	if c.MaxSessions < 0 || c.MaxSessions > MaxMaxSessions {
		bad("max_sessions", "%d is out of range: want 1 to %d", c.MaxSessions, MaxMaxSessions)
	}
	if c.SessionTimeout != "" {
		if d, err := time.ParseDuration(c.SessionTimeout); err != nil || d < time.Second || d > 24*time.Hour {
			bad("session_timeout", "%q is not a duration from 1s to 24h, like \"30m\"", c.SessionTimeout)
		}
	}
	if c.ReconnectDelay != "" {
		if d, err := time.ParseDuration(c.ReconnectDelay); err != nil || d < 10*time.Millisecond || d > 5*time.Minute {
			bad("reconnect_delay", "%q is not a duration from 10ms to 5m, like \"2s\"", c.ReconnectDelay)
		}
	}
	uris := map[string]bool{}
	for i, r := range c.Resources {
		f := fmt.Sprintf("resources[%d]", i)
		if u, err := url.Parse(r.URI); err != nil || u.Scheme == "" {
			bad(f+".uri", "%q is not an absolute URI, like \"notes://today\"", r.URI)
		} else if uris[r.URI] {
			bad(f+".uri", "%q is declared twice", r.URI)
		}
		uris[r.URI] = true
		if strings.TrimSpace(r.Name) == "" {
			bad(f+".name", "is required")
		}
		if (r.Text == "") == (r.File == "") {
			bad(f, "give either text or file")
		}
	}
	for i, t := range c.Templates {
		f := fmt.Sprintf("resource_templates[%d]", i)
		if _, err := uritemplate.New(t.URITemplate); err != nil || !strings.Contains(t.URITemplate, "{") {
			bad(f+".uri_template", "%q is not a URI template with a {variable}", t.URITemplate)
		}
		if strings.TrimSpace(t.Name) == "" {
			bad(f+".name", "is required")
		}
	}
	names := map[string]bool{}
	for i, p := range c.Prompts {
		f := fmt.Sprintf("prompts[%d]", i)
		if strings.TrimSpace(p.Name) == "" {
			bad(f+".name", "is required")
		} else if names[p.Name] {
			bad(f+".name", "%q is declared twice", p.Name)
		}
		names[p.Name] = true
		for j, a := range p.Arguments {
			if strings.TrimSpace(a.Name) == "" {
				bad(fmt.Sprintf("%s.arguments[%d].name", f, j), "is required")
			}
		}
		if len(p.Messages) == 0 {
			bad(f+".messages", "give at least one message")
		}
		for j, m := range p.Messages {
			set := 0
			for _, v := range []string{m.Text, m.Image, m.Resource} {
				if v != "" {
					set++
				}
			}
			if set != 1 {
				bad(fmt.Sprintf("%s.messages[%d]", f, j), "give exactly one of text, image and resource")
			}
			if m.Role != "" && m.Role != "user" && m.Role != "assistant" {
				bad(fmt.Sprintf("%s.messages[%d].role", f, j), "%q is neither \"user\" nor \"assistant\"", m.Role)
			}
			if m.Image != "" && m.MIMEType == "" {
				bad(fmt.Sprintf("%s.messages[%d].mime_type", f, j), "an image needs its media type, like \"image/png\"")
			}
		}
	}
	return errors.Join(errs...)
}

// Interval is c's ProgressInterval (zero when absent or bad).
func (c ServedConfig) Interval() time.Duration {
	d, _ := time.ParseDuration(c.ProgressInterval)
	return d
}

// Idle is c's SessionTimeout (zero when absent or bad).
func (c ServedConfig) Idle() time.Duration {
	d, _ := time.ParseDuration(c.SessionTimeout)
	return d
}

// Retry is c's ReconnectDelay (zero when absent or bad).
func (c ServedConfig) Retry() time.Duration {
	d, _ := time.ParseDuration(c.ReconnectDelay)
	return d
}

// Source is the catalog c declares. A prompt's resource messages are read from
// the server that offers the prompt (ReadOffered).
func (c ServedConfig) Source() Source {
	var out Catalog
	for _, r := range c.Resources {
		r := r
		out.Resources = append(out.Resources, Resource{
			Resource: sdk.Resource{URI: r.URI, Name: r.Name, Description: r.Description, MIMEType: r.MIMEType},
			Read: func(context.Context, string) ([]*sdk.ResourceContents, error) {
				if r.File == "" {
					return TextContents(r.URI, or(r.MIMEType, "text/plain"), r.Text), nil
				}
				b, err := readServedFile(r.File)
				if err != nil {
					return nil, err
				}
				mt := or(r.MIMEType, mimeOf(r.File, b))
				if utf8.Valid(b) && strings.HasPrefix(mt, "text/") {
					return TextContents(r.URI, mt, string(b)), nil
				}
				return BlobContents(r.URI, mt, b), nil
			},
		})
	}
	for _, t := range c.Templates {
		t := t
		out.Templates = append(out.Templates, ResourceTemplate{
			ResourceTemplate: sdk.ResourceTemplate{URITemplate: t.URITemplate, Name: t.Name, Description: t.Description, MIMEType: t.MIMEType},
			Read: func(_ context.Context, uri string, vars map[string]string) ([]*sdk.ResourceContents, error) {
				return TextContents(uri, or(t.MIMEType, "text/plain"), fill(t.Text, vars)), nil
			},
		})
	}
	for _, p := range c.Prompts {
		p := p
		meta := sdk.Prompt{Name: p.Name, Description: p.Description}
		values := map[string][]string{}
		for _, a := range p.Arguments {
			meta.Arguments = append(meta.Arguments, &sdk.PromptArgument{Name: a.Name, Description: a.Description, Required: a.Required})
			if len(a.Values) > 0 {
				values[a.Name] = slices.Clone(a.Values)
			}
		}
		out.Prompts = append(out.Prompts, Prompt{Prompt: meta, Values: values,
			Get: func(ctx context.Context, args map[string]string) (*sdk.GetPromptResult, error) {
				res := &sdk.GetPromptResult{Description: p.Description}
				for _, m := range p.Messages {
					msg := &sdk.PromptMessage{Role: sdk.Role(or(m.Role, "user"))}
					switch {
					case m.Text != "":
						msg.Content = &sdk.TextContent{Text: fill(m.Text, args)}
					case m.Image != "":
						b, err := readServedFile(m.Image)
						if err != nil {
							return nil, fmt.Errorf("prompt %s: %w", p.Name, err)
						}
						msg.Content = &sdk.ImageContent{Data: b, MIMEType: m.MIMEType}
					default:
						uri := fill(m.Resource, args)
						contents, err := ReadOffered(ctx, uri)
						if err != nil {
							return nil, fmt.Errorf("prompt %s: read %s: %w", p.Name, uri, err)
						}
						if len(contents) == 0 {
							return nil, fmt.Errorf("prompt %s: %s has no contents", p.Name, uri)
						}
						if contents[0].URI == "" {
							contents[0].URI = uri
						}
						msg.Content = &sdk.EmbeddedResource{Resource: contents[0]}
					}
					res.Messages = append(res.Messages, msg)
				}
				return res, nil
			}})
	}
	return out
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// fill replaces each {name} of text by vars[name].
func fill(text string, vars map[string]string) string {
	pairs := make([]string, 0, 2*len(vars))
	for k, v := range vars {
		pairs = append(pairs, "{"+k+"}", v)
	}
	return strings.NewReplacer(pairs...).Replace(text)
}

func readServedFile(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() || info.Size() > maxServedFileBytes {
		return nil, fmt.Errorf("%s is not a regular file of at most %d bytes", path, maxServedFileBytes)
	}
	return os.ReadFile(path)
}
