package mcp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/troupe-run/troupe/tools/skills"
)

// SkillScheme is the URI scheme of the skills' files: skill://NAME/PATH, PATH
// relative to the skill's folder (e.g. skill://pdf/references/forms.md).
const SkillScheme = "skill"

// MaxSkillResourceBytes is the largest skill file served as a resource.
const MaxSkillResourceBytes = 4 << 20

// SkillSource offers the skills of set: each skill's instructions (SKILL.md
// without its front matter) as a prompt named after the skill, with an optional
// argument "task" appended to them; each file of its folder (references/,
// assets/, …) as a resource skill://NAME/PATH; and the template
// skill://{skill}/{+path}, which reads a file of a skill added after the listing.
// Reads are confined to the skill's folder like read_skill_file's. A nil set
// offers nothing.
func SkillSource(set *skills.Set) Source {
	return skillSource{set}
}

type skillSource struct{ set *skills.Set }

func (s skillSource) Offer() Catalog {
	var c Catalog
	if s.set == nil {
		return c
	}
	for _, k := range s.set.Skills() {
		name := k.Name
		c.Prompts = append(c.Prompts, Prompt{
			Prompt: sdk.Prompt{Name: name, Title: "Skill " + name, Description: k.Description,
				Arguments: []*sdk.PromptArgument{{Name: "task", Description: "the task to use the skill for; appended to its instructions"}}},
			Get: func(_ context.Context, args map[string]string) (*sdk.GetPromptResult, error) {
				body, _, err := s.set.Body(name)
				if err != nil {
					return nil, skillError(err)
				}
				text := strings.TrimSpace(body)
				if task := strings.TrimSpace(args["task"]); task != "" {
					text += "\n\nTask: " + task
				}
				return &sdk.GetPromptResult{Description: k.Description,
					Messages: []*sdk.PromptMessage{{Role: "user", Content: &sdk.TextContent{Text: text}}}}, nil
			},
		})
		_, files, err := s.set.Body(name)
		if err != nil {
			continue // Body fails the same way when the prompt is read, with the reason
		}
		for _, p := range files {
			if p == "…" { // the listing was cut; the template still reads the rest
				continue
			}
			uri := SkillURI(name, p)
			c.Resources = append(c.Resources, Resource{
				Resource: sdk.Resource{URI: uri, Name: name + "/" + p, Description: "a file of skill " + name, MIMEType: mimeOf(p, nil)},
				Read: func(_ context.Context, uri string) ([]*sdk.ResourceContents, error) {
					return s.read(uri, name, p)
				},
			})
		}
	}
	c.Templates = []ResourceTemplate{{
		ResourceTemplate: sdk.ResourceTemplate{URITemplate: SkillScheme + "://{skill}/{+path}", Name: "skill-file",
			Description: "a file of a skill's folder, by the skill's name and the file's path in the folder"},
		Read: func(_ context.Context, uri string, vars map[string]string) ([]*sdk.ResourceContents, error) {
			p, err := url.PathUnescape(vars["path"])
			if err != nil {
				return nil, mark(fmt.Errorf("%s: %w", uri, err), ErrInvalidParams)
			}
			return s.read(uri, vars["skill"], p)
		},
	}}
	return c
}

func (s skillSource) read(uri, name, p string) ([]*sdk.ResourceContents, error) {
	if p == skills.FileName {
		return nil, mark(fmt.Errorf("%s: a skill's %s is its prompt (prompts/get %s)", uri, skills.FileName, name), ErrInvalidParams)
	}
	b, err := s.set.ReadBytes(name, p, MaxSkillResourceBytes)
	if err != nil {
		return nil, skillError(err)
	}
	mt := mimeOf(p, b)
	if utf8.Valid(b) && !strings.HasPrefix(mt, "image/") && !strings.HasPrefix(mt, "audio/") && !strings.HasPrefix(mt, "video/") {
		return TextContents(uri, mt, string(b)), nil
	}
	return BlobContents(uri, mt, b), nil
}

// skillError marks an error of the skills' set for the client: a skill or a file
// that is not there ErrNotFound, a path that names no file of the skill's folder
// ErrInvalidParams; any other (an unreadable file) stays an internal error.
func skillError(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return mark(err, ErrNotFound)
	case errors.Is(err, fs.ErrInvalid):
		return mark(err, ErrInvalidParams)
	}
	return err
}

// SkillURI is the URI of the file at p (slash-separated, relative to the skill's
// folder) of skill name.
func SkillURI(name, p string) string {
	return (&url.URL{Scheme: SkillScheme, Host: name, Path: "/" + p}).String()
}

// mimeOf guesses a file's media type from its extension, or from its bytes (text
// or not) when it has none known.
func mimeOf(p string, b []byte) string {
	switch strings.ToLower(path.Ext(p)) {
	case ".md", ".markdown":
		return "text/markdown"
	case ".py", ".sh", ".txt", ".yaml", ".yml", ".toml", "":
		if b == nil || utf8.Valid(b) {
			return "text/plain"
		}
	}
	if mt := mime.TypeByExtension(path.Ext(p)); mt != "" {
		return mt
	}
	if b != nil && utf8.Valid(b) {
		return "text/plain"
	}
	return "application/octet-stream"
}
