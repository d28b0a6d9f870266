package actors

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// Gathering: before a task's first model call, its session retrieves what its
// context should know of the task from the agent's sources (ContextSources): the
// chunks of its knowledge base that match the task's input (evidence), the
// memories of its namespace that match it (recall), its notes that match it
// (notes). Each retrieval is a tool call with a purpose (PurposeEvidence,
// PurposeRecall, PurposeNotes) on the agent's own tools, recorded and keyed like
// every effect and performed in parallel; its result is folded into the task's
// state as context items, which every model request of the task's loop offers
// the context builder: evidence in the Evidence section ("evidence/<chunk>"),
// memories and notes in State ("memory/<id>", "note/<id>"). They do not enter the
// conversation and are not steps. A retrieval that fails does not fail the task:
// it goes on without those items, and the context report says so
// (messages.ContextReport.Notes). A refold or a replay reads the recorded results
// and retrieves nothing again.

// Purposes of the gathering calls (messages.ToolCallRequested.Purpose).
const (
	PurposeEvidence = "evidence"
	PurposeRecall   = "recall"
	PurposeNotes    = "notes"
)

// Bounds of ContextOptions' gathering fields.
const (
	MaxEvidence = 20  // the rag tool's search limit
	MaxRecall   = 100 // the memory tool's search limit
	MaxNotes    = 100 // the notes tool's search limit
)

// DefaultEvidence and DefaultRecall are what a node gathers for an agent that
// has the source and sets no number (package node resolves them): evidence when
// the agent has a knowledge base and the rag tool, recall when it has the memory
// tool. Notes are gathered only when asked (ContextOptions.Notes).
const (
	DefaultEvidence = 5
	DefaultRecall   = 5
)

// GatherOff is a node's setting of ContextOptions.Evidence, Recall or Notes that
// gathers none of it, where 0 would take the node's default (package node). The
// session gathers nothing for any number that is not above 0.
const GatherOff = -1

// ContextSources are the tools a task's gathered context comes from: the agent's
// own tools, called for it (tools.Call.Agent), so that a knowledge base or a
// namespace left empty is the tool's default for the agent. A source whose tool
// is "" or not among the agent's tools is not gathered from.
type ContextSources struct {
	// KnowledgeTool is the rag tool's name; KnowledgeBase the base searched.
	KnowledgeTool, KnowledgeBase string
	// MemoryTool is the memory tool's name, MemoryNamespace the namespace
	// searched; MemoryExpanded says its actions are tools of their own
	// (<name>_search).
	MemoryTool, MemoryNamespace string
	MemoryExpanded              bool
	// NotesTool is the notes tool's name; NotesExpanded says its operations are
	// tools of their own (<name>_search).
	NotesTool     string
	NotesExpanded bool
}

// gatherSource is one source of a task's gathered context.
type gatherSource struct {
	purpose string
	n       int
	tool    string
	args    string
}

// gatherSources returns the sources agent a gathers from for a task whose input
// is input, in their fixed order: evidence, recall, notes.
func (a *Agent) gatherSources(input string) []gatherSource {
	src, o := a.Sources, a.Context
	query := clip(input, 2000)
	var out []gatherSource
	if o.Evidence > 0 && src.KnowledgeTool != "" {
		tool, args := opCall(src.KnowledgeTool, false, "search", struct {
			KB     string `json:"kb,omitempty"`
			Query  string `json:"query"`
			Limit  int    `json:"limit"`
			Format string `json:"format"`
		}{src.KnowledgeBase, query, min(o.Evidence, MaxEvidence), "json"})
		out = append(out, gatherSource{PurposeEvidence, o.Evidence, tool, args})
	}
	if o.Recall > 0 && src.MemoryTool != "" {
		tool, args := opCall(src.MemoryTool, src.MemoryExpanded, "search", struct {
			Namespace string `json:"namespace,omitempty"`
			Query     string `json:"query"`
			Limit     int    `json:"limit"`
		}{src.MemoryNamespace, query, min(o.Recall, MaxRecall)})
		out = append(out, gatherSource{PurposeRecall, o.Recall, tool, args})
	}
	if o.Notes > 0 && src.NotesTool != "" {
		tool, args := opCall(src.NotesTool, src.NotesExpanded, "search", struct {
			Query string `json:"query"`
			Limit int    `json:"limit"`
		}{query, min(o.Notes, MaxNotes)})
		out = append(out, gatherSource{PurposeNotes, o.Notes, tool, args})
	}
	return out
}

// opCall returns the tool and arguments of a toolbox's operation: the tool
// itself with {"op", "args"}, or <tool>_<op> with the arguments when expanded.
func opCall(tool string, expanded bool, op string, args any) (string, string) {
	if expanded {
		b, _ := json.Marshal(args) // structs of strings and ints: it cannot fail
		return tool + "_" + op, string(b)
	}
	b, _ := json.Marshal(struct {
		Op   string `json:"op"`
		Args any    `json:"args"`
	}{op, args})
	return tool, string(b)
}

// gathered is one gathering call of a task and what its result gave.
type gathered struct {
	purpose string
	key     string
	done    bool
	items   []pctx.Item
	// note says what went wrong ("" when nothing did).
	note string
	// byMeaning says the evidence search's notes say no word of the task is in the
	// knowledge base, so that its hits were ranked by meaning alone (evidenceItems).
	byMeaning bool
}

// gatherState is what a task's fold keeps of its gathering.
type gatherState struct {
	calls []*gathered
	// begun says the task made a move of its own (a model call, a tool call
	// without a gathering purpose): it gathers nothing more.
	begun bool
}

// isGatherPurpose reports whether purpose is a gathering call's.
func isGatherPurpose(purpose string) bool {
	return purpose == PurposeEvidence || purpose == PurposeRecall || purpose == PurposeNotes
}

// foldGather folds the active task's gathering: its calls' requests and results,
// and its first move of its own.
func (s *SessionState) foldGather(e messages.Envelope, p messages.Payload) {
	t := s.active
	if t == nil || e.CorrelationID != t.ID {
		return
	}
	g := &t.gather
	switch p := p.(type) {
	case *messages.ModelRequested:
		g.begun = true
	case *messages.ToolCallRequested:
		if !isGatherPurpose(p.Purpose) {
			g.begun = true
			return
		}
		g.calls = append(g.calls, &gathered{purpose: p.Purpose, key: p.Key})
	case *messages.ToolCallCompleted:
		for _, c := range g.calls {
			if c.key != p.Key || c.done {
				continue
			}
			c.done = true
			c.items, c.note = gatherItems(c.purpose, p, t.start)
			c.byMeaning = c.purpose == PurposeEvidence && p.Error == "" && foundByMeaning(p.Result)
		}
	}
}

// decideGather returns the active task's next gathering call, or nil; wait
// reports that the task waits for its gathering calls' results.
func (s *SessionState) decideGather(a *Agent, t *taskState, nextSeq uint64) (d *Decision, wait bool) {
	g := &t.gather
	if g.begun {
		return nil, false
	}
	for _, src := range a.gatherSources(t.Spec.Input) {
		// A tool whose calls wait for a human's approval is not called on the
		// agent's behalf: the agent may still call it, and wait.
		if g.call(src.purpose) != nil || !a.hasTool(src.tool) || a.Approvals[src.tool] {
			continue
		}
		return &Decision{Payload: &messages.ToolCallRequested{Key: s.keyAt(nextSeq), CallID: "gather/" + src.purpose, Tool: src.tool,
			Arguments: src.args, Step: t.Steps, Purpose: src.purpose}, CausationID: t.ID, TaskID: t.ID}, false
	}
	for _, c := range g.calls {
		if !c.done {
			return nil, true
		}
	}
	return nil, false
}

// call returns the task's gathering call with this purpose, or nil.
func (g *gatherState) call(purpose string) *gathered {
	for _, c := range g.calls {
		if c.purpose == purpose {
			return c
		}
	}
	return nil
}

// appendItems appends the task's gathered items, in the order of its calls,
// and returns them with the notes on its gathering. Under rules (Agent.Context's;
// 0: this build's) from rulesEvidenceByMeaning, each passage of an evidence search
// that found no word of the task says it was found by meaning alone; from
// rulesQuotedTags, a tag in an item's text that names a section's block is
// quoted (pctx.QuoteSectionTags; from rulesQuotedLookalikes also one written with
// lookalikes of its characters, pctx.QuoteSectionLookalikeTags), so that a memory,
// a passage or a note cannot end the block it is rendered in.
func (g *gatherState) appendItems(items []pctx.Item, rules int) ([]pctx.Item, []string) {
	var notes []string
	quote := rules == 0 || rules >= rulesQuotedTags
	for _, c := range g.calls {
		if !c.done {
			continue
		}
		byMeaning := c.byMeaning && (rules == 0 || rules >= rulesEvidenceByMeaning)
		if !byMeaning && !quote {
			items = append(items, c.items...)
		} else {
			for _, it := range c.items {
				text := it.Text
				switch {
				case rules == 0 || rules >= rulesQuotedLookalikes:
					text = pctx.QuoteSectionLookalikeTags(text)
				case quote:
					text = pctx.QuoteSectionTags(text)
				}
				if byMeaning {
					text = byMeaningLabel(text)
				}
				if text != it.Text {
					it.Text = text
					it.Tokens = pctx.CountText(contextTokens, it.Text)
				}
				items = append(items, it)
			}
		}
		if c.note != "" {
			notes = append(notes, c.note)
		}
	}
	return items, notes
}

// size returns the number of the task's gathered items, with its notes: what a
// cached context must have been built with.
func (g *gatherState) size() int {
	n := 0
	for _, c := range g.calls {
		if c.done {
			n += len(c.items) + 1
		}
	}
	return n
}

// gatherItems makes the context items of a gathering call's result r: purpose's
// kind, all at pos (recency does not rank them: relevance does), best first. The
// note says why there are none when the call failed or its result could not be
// read.
func gatherItems(purpose string, r *messages.ToolCallCompleted, pos int) ([]pctx.Item, string) {
	what := map[string]string{PurposeEvidence: "evidence from the knowledge base", PurposeRecall: "memories", PurposeNotes: "notes"}[purpose]
	if r.Error != "" {
		return nil, fmt.Sprintf("%s: %s failed, the task goes on without %s: %s", purpose, r.Tool, what, oneLine(r.Error))
	}
	var items []pctx.Item
	var err error
	switch purpose {
	case PurposeEvidence:
		items, err = evidenceItems(r.Result)
	case PurposeRecall:
		items, err = memoryItems(r.Result)
	case PurposeNotes:
		items, err = noteItems(r.Result)
	}
	if err != nil {
		return nil, fmt.Sprintf("%s: %s's result could not be read, the task goes on without %s: %v", purpose, r.Tool, what, err)
	}
	for i := range items {
		items[i].Pos = pos
		items[i].Tokens = pctx.CountText(contextTokens, items[i].Text)
	}
	return items, ""
}

// evidenceItems reads the rag tool's search in JSON: each hit an Evidence item
// labelled [source > heading] so the model can cite it, its relevance its score
// over the best hit's.
func evidenceItems(result string) ([]pctx.Item, error) {
	var res struct {
		Hits []struct {
			ChunkID     string  `json:"chunk_id"`
			Source      string  `json:"source"`
			HeadingPath string  `json:"heading_path"`
			Content     string  `json:"content"`
			Score       float64 `json:"score"`
		} `json:"hits"`
	}
	if err := json.Unmarshal([]byte(result), &res); err != nil {
		return nil, fmt.Errorf("not the rag tool's search in JSON: %w", err)
	}
	scores := make([]float64, len(res.Hits))
	for i, h := range res.Hits {
		scores[i] = h.Score
	}
	rel := relevances(scores)
	items := make([]pctx.Item, 0, len(res.Hits))
	seen := map[string]bool{}
	for i, h := range res.Hits {
		content := strings.TrimSpace(h.Content)
		if content == "" || h.ChunkID == "" || seen[h.ChunkID] {
			continue
		}
		seen[h.ChunkID] = true
		label := h.Source
		if h.HeadingPath != "" {
			label += " > " + h.HeadingPath
		}
		items = append(items, pctx.Item{ID: "evidence/" + h.ChunkID, Kind: pctx.KindEvidence, Section: pctx.SectionEvidence,
			Text: "[" + label + "]\n" + content, Relevance: rel[i]})
	}
	return items, nil
}

// The rag tool's note on a hybrid search that found no word of its query
// (knowledge/search.go's noWordNote): noWordHead begins it, and with a semantic
// embedder it says its hits were ranked by meaningAlone (with the offline hashing
// embedder it says they match words of HyDE's answer, or it has no hits).
const (
	noWordHead   = "no word of the query is in the knowledge base"
	meaningAlone = "ranked by meaning alone"
)

// foundByMeaning reports whether the rag tool's search result says that no word
// of its query is in the knowledge base, and that its hits were found by meaning
// alone.
func foundByMeaning(result string) bool {
	var res struct {
		Notes []string `json:"notes"`
	}
	if json.Unmarshal([]byte(result), &res) != nil {
		return false
	}
	return slices.ContainsFunc(res.Notes, func(n string) bool {
		return strings.HasPrefix(n, noWordHead) && strings.Contains(n, meaningAlone)
	})
}

// byMeaningNote follows the label of a passage that an evidence search found by
// meaning alone.
const byMeaningNote = " (found by meaning alone: no word of the task is in the knowledge base, so this passage may not answer it)"

// byMeaningLabel adds byMeaningNote to the label line of an evidence item's text
// ("[source > heading]\ncontent").
func byMeaningLabel(text string) string {
	label, content, ok := strings.Cut(text, "\n")
	if !ok {
		return text + byMeaningNote
	}
	return label + byMeaningNote + "\n" + content
}

// memoryItems reads the memory tool's search: each memory a State item, its
// relevance its score over the best memory's.
func memoryItems(result string) ([]pctx.Item, error) {
	var res struct {
		Results []struct {
			ID      string  `json:"id"`
			Tier    string  `json:"tier"`
			Content string  `json:"content"`
			Score   float64 `json:"score"`
			Invalid bool    `json:"invalid"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(result), &res); err != nil {
		return nil, fmt.Errorf("not the memory tool's search: %w", err)
	}
	scores := make([]float64, len(res.Results))
	for i, m := range res.Results {
		scores[i] = m.Score
	}
	rel := relevances(scores)
	items := make([]pctx.Item, 0, len(res.Results))
	seen := map[string]bool{}
	for i, m := range res.Results {
		content := strings.TrimSpace(m.Content)
		if content == "" || m.ID == "" || m.Invalid || seen[m.ID] {
			continue
		}
		seen[m.ID] = true
		items = append(items, pctx.Item{ID: "memory/" + m.ID, Kind: pctx.KindMemory, Section: pctx.SectionState,
			Text: fmt.Sprintf("[memory %s, %s] %s", m.ID, cmp.Or(m.Tier, "semantic"), content), Relevance: rel[i]})
	}
	return items, nil
}

// noteItems reads the notes tool's search: each note a State item, best first,
// its relevance by its rank (the search gives no score).
func noteItems(result string) ([]pctx.Item, error) {
	var res struct {
		Notes []struct {
			ID   string   `json:"id"`
			Type string   `json:"type"`
			Tags []string `json:"tags"`
			Body string   `json:"body"`
		} `json:"notes"`
	}
	if err := json.Unmarshal([]byte(result), &res); err != nil {
		return nil, fmt.Errorf("not the notes tool's search: %w", err)
	}
	items := make([]pctx.Item, 0, len(res.Notes))
	seen := map[string]bool{}
	for i, n := range res.Notes {
		body := strings.TrimSpace(n.Body)
		if body == "" || n.ID == "" || seen[n.ID] {
			continue
		}
		seen[n.ID] = true
		head := "[note " + n.ID + ", " + cmp.Or(n.Type, "note")
		if len(n.Tags) > 0 {
			head += ", #" + strings.Join(n.Tags, " #")
		}
		items = append(items, pctx.Item{ID: "note/" + n.ID, Kind: pctx.KindNote, Section: pctx.SectionState,
			Text: head + "] " + body, Relevance: round6(float64(len(res.Notes)-i) / float64(len(res.Notes)))})
	}
	return items, nil
}

// relevances normalises a search's scores to [0, 1]: each over the best one
// (the best scores 1), negatives 0; when none is above 0 (or one is not a
// number), by rank: the first 1, the last 1/n.
func relevances(scores []float64) []float64 {
	out := make([]float64, len(scores))
	best := 0.0
	ok := true
	for _, s := range scores {
		ok = ok && !math.IsNaN(s) && !math.IsInf(s, 0)
		best = max(best, s)
	}
	for i, s := range scores {
		if !ok || best <= 0 {
			out[i] = round6(float64(len(scores)-i) / float64(len(scores)))
			continue
		}
		out[i] = round6(min(max(s/best, 0), 1))
	}
	return out
}

// round6 rounds x to 6 decimals, as the builder's scores are: every node and a
// replay read the same relevance from the same recorded result.
func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }

// validateGather reports gathering numbers out of range.
func (o ContextOptions) validateGather() error {
	for _, f := range []struct {
		name   string
		n, max int
	}{{"evidence", o.Evidence, MaxEvidence}, {"recall", o.Recall, MaxRecall}, {"notes", o.Notes, MaxNotes}} {
		if f.n > f.max {
			return fmt.Errorf("context %s %d is out of range: want 0 to %d", f.name, f.n, f.max)
		}
	}
	return nil
}
