package nodeconfig

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/notes"
)

// ToolsFile is the "tools" section of the configuration file: the built-in tools the
// node's agent gets beyond calculator and clock. A section present enables its tool:
//
//	"tools": {"http_fetch": {"allow": ["10.0.0.0/8", "intranet.example"]},
//	          "files": {"root": "./work"},
//	          "notes": {"max_notes": 500}}
type ToolsFile struct {
	HTTPFetch *HTTPFetchFile `json:"http_fetch"`
	Files     *FilesFile     `json:"files"`
	Notes     *NotesFile     `json:"notes"`
}

// HTTPFetchFile configures http_fetch (tools.HTTPFetchConfig).
type HTTPFetchFile struct {
	// Allow lists CIDRs, addresses and host names reachable beyond the public internet.
	Allow    []string `json:"allow"`
	MaxBytes int      `json:"max_bytes"`
	Timeout  string   `json:"timeout"`
}

// FilesFile configures files (tools.FilesConfig).
type FilesFile struct {
	// Root is the directory the tool works in, relative to the working directory.
	Root     string `json:"root"`
	ReadOnly bool   `json:"read_only"`
	MaxBytes int    `json:"max_bytes"`
	// Expand offers files_read, files_write, … instead of one files tool.
	Expand bool `json:"expand"`
}

// NotesFile configures notes (tools/notes.File): the agent's notes, kept as events
// in the node's event log. The section enables them unless enabled is false.
type NotesFile = notes.File

// Limits of the notes section.
const (
	maxNoteBytes = 1 << 20
	maxNoteTags  = 256
	maxNotes     = 1_000_000
)

// NotesConfig returns the configuration of the notes tool, or nil when it is not enabled.
// The node fills in its log.
func (t ToolsFile) NotesConfig() *notes.Config { return t.Notes.Config() }

// Limits of the tools section.
const (
	maxToolBytes   = 64 << 20
	maxToolTimeout = 10 * time.Minute
)

// validate checks the tools section, naming fields as tools.SECTION.FIELD. It does
// not look at the file system: Build does, when the node starts.
func (t ToolsFile) validate() []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("tools."+field+": "+format, args...))
	}
	if h := t.HTTPFetch; h != nil {
		if _, err := tools.NewAddressPolicy(h.Allow); err != nil {
			bad("http_fetch.allow", "%v", err)
		}
		if h.MaxBytes < 0 || h.MaxBytes > maxToolBytes {
			bad("http_fetch.max_bytes", "%d is out of range: want 1 to %d (0 or absent: %d)", h.MaxBytes, maxToolBytes, tools.DefaultFetchMaxBytes)
		}
		if h.Timeout != "" {
			if err := checkDuration(h.Timeout, time.Millisecond, maxToolTimeout); err != nil {
				bad("http_fetch.timeout", "%v", err)
			}
		}
	}
	if f := t.Files; f != nil {
		if strings.TrimSpace(f.Root) == "" || strings.ContainsRune(f.Root, 0) {
			bad("files.root", "%q is not a usable directory path: the files tool needs the directory it works in", f.Root)
		}
		if f.MaxBytes < 0 || f.MaxBytes > maxToolBytes {
			bad("files.max_bytes", "%d is out of range: want 1 to %d (0 or absent: %d)", f.MaxBytes, maxToolBytes, tools.DefaultFilesMaxBytes)
		}
	}
	if n := t.Notes; n != nil {
		for _, l := range []struct {
			field      string
			got, limit int
			dflt       int
		}{
			{"max_body_bytes", n.MaxBodyBytes, maxNoteBytes, notes.DefaultMaxBodyBytes},
			{"max_tags", n.MaxTags, maxNoteTags, notes.DefaultMaxTags},
			{"max_notes", n.MaxNotes, maxNotes, notes.DefaultMaxNotes},
		} {
			if l.got < 0 || l.got > l.limit {
				bad("notes."+l.field, "%d is out of range: want 1 to %d (0 or absent: %d)", l.got, l.limit, l.dflt)
			}
		}
	}
	return errs
}

// Build returns the tools of the node's default agent: calculator and clock, the
// built-ins the section enables, then extra. The files tool touches none of
// protect (tools.FilesConfig.Protect): the node's own files.
func (t ToolsFile) Build(extra []tools.Tool, protect []string) ([]tools.Tool, error) {
	out := []tools.Tool{tools.Calculator{}, tools.NewClock(nil)}
	if h := t.HTTPFetch; h != nil {
		cfg := tools.HTTPFetchConfig{Allow: h.Allow, MaxBytes: h.MaxBytes}
		if h.Timeout != "" {
			d, err := time.ParseDuration(h.Timeout)
			if err != nil {
				return nil, fmt.Errorf("tools.http_fetch.timeout: %w", err)
			}
			cfg.Timeout = d
		}
		fetch, err := tools.NewHTTPFetch(cfg)
		if err != nil {
			return nil, err
		}
		out = append(out, fetch)
	}
	if f := t.Files; f != nil {
		box, err := tools.NewFiles(tools.FilesConfig{Root: f.Root, ReadOnly: f.ReadOnly, MaxReadBytes: f.MaxBytes, MaxWriteBytes: f.MaxBytes,
			Protect: protect})
		if err != nil {
			return nil, fmt.Errorf("tools.files: %w", err)
		}
		if f.Expand {
			out = append(out, box.Expand()...)
		} else {
			out = append(out, box)
		}
	}
	return append(out, extra...), nil
}

// ChainTools returns the tools of the configured chains, whose steps call tools of
// available or, by their catalog names, of client's servers (node.Config.Chains).
func ChainTools(available []tools.Tool, chains []tools.Chain, client *mcp.Client) ([]tools.Tool, error) {
	if len(chains) == 0 {
		return nil, nil
	}
	var opts []tools.ChainOption
	if client != nil {
		opts = append(opts, tools.WithStepCatalog(client))
	}
	cts, err := tools.NewChainTools(chains, available, opts...)
	if err != nil {
		return nil, fmt.Errorf("chains: %w", err)
	}
	out := make([]tools.Tool, len(cts))
	for i, ct := range cts {
		out[i] = ct
	}
	return out, nil
}

// unknownChainField names an unknown field of a chain or of its steps, or returns
// nil when name is in none of them.
func unknownChainField(raw json.RawMessage, name string) error {
	var chains []map[string]json.RawMessage
	if json.Unmarshal(raw, &chains) != nil {
		return nil
	}
	for i, c := range chains {
		if _, ok := c[name]; ok {
			return fmt.Errorf("unknown field \"chains[%d].%s\": a chain's fields are %s", i, name, jsonFields[tools.Chain]())
		}
		var steps []map[string]json.RawMessage
		_ = json.Unmarshal(c["steps"], &steps)
		for j, st := range steps {
			if _, ok := st[name]; ok {
				return fmt.Errorf("unknown field \"chains[%d].steps[%d].%s\": a step's fields are %s", i, j, name, jsonFields[tools.ChainStep]())
			}
		}
	}
	return nil
}

// unknownToolsField names an unknown field of the tools section (raw) with where it
// is, or returns nil when name is not in it.
func unknownToolsField(raw json.RawMessage, name string) error {
	var sections map[string]json.RawMessage
	if json.Unmarshal(raw, &sections) != nil {
		return nil
	}
	if _, ok := sections[name]; ok {
		return fmt.Errorf("unknown field \"tools.%s\": the tools are %s", name, jsonFields[ToolsFile]())
	}
	for section, fields := range map[string]string{"http_fetch": jsonFields[HTTPFetchFile](), "files": jsonFields[FilesFile](), "notes": jsonFields[NotesFile]()} {
		var m map[string]json.RawMessage
		if json.Unmarshal(sections[section], &m) == nil {
			if _, ok := m[name]; ok {
				return fmt.Errorf("unknown field \"tools.%s.%s\": its fields are %s", section, name, fields)
			}
		}
	}
	return nil
}
