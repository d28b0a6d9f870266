package notes

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/troupe-run/troupe/tools/disclosure"
)

// Filter narrows List and Search. The zero value keeps every note.
type Filter struct {
	// Type keeps the notes of this type.
	Type string
	// Tags keeps the notes that have every one of these tags.
	Tags []string
	// Limit bounds the notes returned (default DefaultLimit, at most MaxLimit).
	Limit int
}

// Page is what List and Search return: the notes, and how many matched in all.
type Page struct {
	Notes   []Note `json:"notes"`
	Matched int    `json:"matched"`
}

// List returns the notes that pass f, most recently changed first.
func (n *Notes) List(ctx context.Context, f Filter) (Page, error) {
	matched, err := n.filter(ctx, f)
	if err != nil {
		return Page{}, err
	}
	slices.SortFunc(matched, func(a, b Note) int { return cmp.Compare(b.updatedSeq, a.updatedSeq) })
	return page(matched, len(matched), f.Limit), nil
}

// Search returns the notes that pass f ranked by BM25 relevance to query over
// their type, tags and body, best first; notes that share no word with the query
// are left out.
func (n *Notes) Search(ctx context.Context, query string, f Filter) (Page, error) {
	if strings.TrimSpace(query) == "" {
		return Page{}, inputErr(ErrBadNote, "the query is empty: say what to look for")
	}
	matched, err := n.filter(ctx, f)
	if err != nil {
		return Page{}, err
	}
	ids := make([]string, len(matched))
	text := make([]string, len(matched))
	byID := make(map[string]Note, len(matched))
	for i, note := range matched {
		ids[i] = note.ID
		text[i] = note.Type + " " + strings.Join(note.Tags, " ") + " " + note.Body
		byID[note.ID] = note
	}
	hits := disclosure.NewBM25(ids, text).Search(query, len(ids))
	found := make([]Note, len(hits))
	for i, h := range hits {
		found[i] = byID[h.Name]
	}
	return page(found, len(found), f.Limit), nil
}

// filter folds the stream and returns copies of the notes that pass f.
func (n *Notes) filter(ctx context.Context, f Filter) ([]Note, error) {
	var typ string
	if f.Type != "" {
		t, err := n.word("type", f.Type)
		if err != nil {
			return nil, err
		}
		typ = t
	}
	tags := make([]string, 0, len(f.Tags))
	for _, raw := range f.Tags {
		t, err := n.word("tag", raw)
		if err != nil {
			return nil, err
		}
		tags = append(tags, t)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.refresh(ctx); err != nil {
		return nil, err
	}
	var out []Note
	for _, note := range n.notes {
		if typ != "" && note.Type != typ {
			continue
		}
		if !hasAll(note.Tags, tags) {
			continue
		}
		out = append(out, copyNote(note))
	}
	// Map order must not reach the caller: the notes' IDs order them first.
	slices.SortFunc(out, func(a, b Note) int { return cmp.Compare(a.updatedSeq, b.updatedSeq) })
	return out, nil
}

func hasAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

func page(notes []Note, matched, limit int) Page {
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)
	if len(notes) > limit {
		notes = notes[:limit]
	}
	if notes == nil {
		notes = []Note{}
	}
	return Page{Notes: notes, Matched: matched}
}
