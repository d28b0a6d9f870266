package tools

import (
	"encoding/json"
	"strings"

	"github.com/troupe-run/troupe/messages"
)

// The files tool's list operation, as this build describes it and as builds
// before f4b1e23 did (they did not quote names; the sentence was added with it).
const (
	filesListDescription       = "Lists a directory: one entry per line, directories ending in /; a name that is not plain printable text is quoted."
	filesListDescriptionBefore = "Lists a directory: one entry per line, directories ending in /."
)

// describedBefore is a change to a built-in tool's description: the text now and the
// text it replaced. The description is part of every prompt that offers the tool
// (llm.PromptHash hashes it), so a session recorded by an earlier build asked its
// model with the earlier text.
type describedBefore struct {
	tools  []string // the tool's names: collapsed, and its operation's expanded name
	prefix string   // or the prefix of the names of a kind of tool ("a2a__")
	now    string
	before string
	// paramsNow and paramsBefore, when set, are a change to its parameters'
	// schema, which the prompt's hash covers too, made with the description's.
	paramsNow, paramsBefore string
}

// The A2A tool (a2a.Tool, named a2a.ToolPrefix + the agent's name), as this build
// describes it and as builds before it took a task_id did.
const (
	a2aPrefix            = "a2a__"
	a2aDescription       = "Pass the context_id it returns to continue the same conversation. When it answers that it needs more input, answer with the task_id it gives, and the context_id, to go on with that task."
	a2aDescriptionBefore = "Pass the context_id it returns to continue the same conversation."
	a2aTaskParam         = `,"task_id":{"type":"string","maxLength":256,"description":"The task_id of an answer that needs more input, to answer it"}`
)

// descriptionChanges lists the changes to the built-in tools' descriptions since
// they were first recorded, each one once, the latest first.
func descriptionChanges() []describedBefore {
	return []describedBefore{
		{prefix: a2aPrefix, now: a2aDescription, before: a2aDescriptionBefore, paramsNow: a2aTaskParam},
		{tools: []string{"files", "files_list"}, now: filesListDescription, before: filesListDescriptionBefore},
	}
}

// PriorSpecs returns specs as earlier builds offered them: one list per earlier
// wording of a built-in tool among specs (its description, and its parameters'
// schema where that changed with it), the latest first (each list has every
// change up to it undone), or nil when no tool of specs was described otherwise
// before. specs itself is not changed. Replay's verify uses it to take a model
// request an earlier build recorded as the one this build would make, when the
// two differ only in those words.
func PriorSpecs(specs []messages.ToolSpec) [][]messages.ToolSpec {
	var out [][]messages.ToolSpec
	cur := specs
	for _, c := range descriptionChanges() {
		var next []messages.ToolSpec
		for i, s := range cur {
			if !nameIn(s.Name, c.tools) && (c.prefix == "" || !strings.HasPrefix(s.Name, c.prefix)) || !strings.Contains(s.Description, c.now) ||
				c.paramsNow != "" && !strings.Contains(string(s.Parameters), c.paramsNow) {
				continue
			}
			if next == nil {
				next = append([]messages.ToolSpec(nil), cur...)
			}
			next[i].Description = strings.Replace(s.Description, c.now, c.before, 1)
			if c.paramsNow != "" {
				next[i].Parameters = json.RawMessage(strings.Replace(string(s.Parameters), c.paramsNow, c.paramsBefore, 1))
			}
		}
		if next != nil {
			out = append(out, next)
			cur = next
		}
	}
	return out
}

func nameIn(name string, names []string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}
