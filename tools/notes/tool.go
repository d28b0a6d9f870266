package notes

import (
	"context"
	"fmt"

	"github.com/troupe-run/troupe/tools"
)

// The arguments of the tool's operations; their JSON Schemas are derived from these
// types (tools.SchemaFor).
type (
	addArgs struct {
		Type string   `json:"type,omitempty" jsonschema:"The note's kind, one word: fact, todo, decision, preference, … (default note)"`
		Tags []string `json:"tags,omitempty" jsonschema:"Words to find the note by later (lowercase, no spaces)"`
		Body string   `json:"body" jsonschema:"The note's text" tool:"minLength=1"`
	}
	listArgs struct {
		Type  string   `json:"type,omitempty" jsonschema:"Only notes of this type"`
		Tags  []string `json:"tags,omitempty" jsonschema:"Only notes that have every one of these tags"`
		Limit int      `json:"limit,omitempty" jsonschema:"At most this many notes (default 20)" tool:"minimum=1,maximum=100"`
	}
	searchArgs struct {
		Query string   `json:"query" jsonschema:"Words to look for in the notes' type, tags and body" tool:"minLength=1"`
		Type  string   `json:"type,omitempty" jsonschema:"Only notes of this type"`
		Tags  []string `json:"tags,omitempty" jsonschema:"Only notes that have every one of these tags"`
		Limit int      `json:"limit,omitempty" jsonschema:"At most this many notes (default 20)" tool:"minimum=1,maximum=100"`
	}
	updateArgs struct {
		ID   string    `json:"id" jsonschema:"The note's id, as add, list or search gave it" tool:"minLength=1"`
		Type *string   `json:"type,omitempty" jsonschema:"The note's new type"`
		Tags *[]string `json:"tags,omitempty" jsonschema:"The note's new tags, replacing all of them ([] removes them)"`
		Body *string   `json:"body,omitempty" jsonschema:"The note's new text, replacing it"`
	}
	removeArgs struct {
		ID string `json:"id" jsonschema:"The note's id" tool:"minLength=1"`
	}
)

// removed is what remove returns.
type removed struct {
	Removed string `json:"removed"`
}

// Toolbox returns the notes as the tool "notes", with the operations add, list,
// search, update and remove (one Go method each, its schema derived from its
// argument type).
func (n *Notes) Toolbox() (*tools.Toolbox, error) {
	readOnly := tools.WithSideEffects(false)
	args := tools.WithMaxArguments(n.cfg.MaxBodyBytes*2 + 64<<10) // a body, escaped, and the rest
	return tools.NewToolbox("notes",
		"The agent's own notes, kept across tasks and sessions: each has an id, a type, tags and a body. "+
			"Note what will matter later (facts learned, decisions, preferences, things to do), and look before asking again.",
		tools.Sub("add", fmt.Sprintf("Adds a note and returns it with its id (a body of at most %d bytes, at most %d tags; the agent keeps at most %d notes).",
			n.cfg.MaxBodyBytes, n.cfg.MaxTags, n.cfg.MaxNotes), n.add, args),
		tools.Sub("list", "Lists notes, most recently changed first, optionally of one type or with given tags.", n.list, readOnly),
		tools.Sub("search", "Finds the notes most relevant to a query, best first, optionally of one type or with given tags.", n.search, readOnly),
		tools.Sub("update", "Changes a note's type, tags or body (the fields given) and returns it.", n.update, args),
		tools.Sub("remove", "Removes a note.", n.remove),
	)
}

// Tools returns the notes as tools: the one tool of Toolbox, or its operations as
// tools of their own (notes_add, …) when Config.Expand is set.
func (n *Notes) Tools() ([]tools.Tool, error) {
	box, err := n.Toolbox()
	if err != nil {
		return nil, err
	}
	if n.cfg.Expand {
		return box.Expand(), nil
	}
	return []tools.Tool{box}, nil
}

func (n *Notes) add(ctx context.Context, a addArgs) (Note, error) {
	return n.Add(ctx, a.Type, a.Tags, a.Body)
}

func (n *Notes) list(ctx context.Context, a listArgs) (Page, error) {
	return n.List(ctx, Filter{Type: a.Type, Tags: a.Tags, Limit: a.Limit})
}

func (n *Notes) search(ctx context.Context, a searchArgs) (Page, error) {
	return n.Search(ctx, a.Query, Filter{Type: a.Type, Tags: a.Tags, Limit: a.Limit})
}

func (n *Notes) update(ctx context.Context, a updateArgs) (Note, error) {
	return n.Update(ctx, a.ID, a.Type, a.Tags, a.Body)
}

func (n *Notes) remove(ctx context.Context, a removeArgs) (removed, error) {
	if err := n.Remove(ctx, a.ID); err != nil {
		return removed{}, err
	}
	return removed{Removed: a.ID}, nil
}
