package node

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
)

// An agent's gathered context (actors/gather.go): before a task's first model
// call its session searches the agent's knowledge base (evidence), its memory
// namespace (recall) and its notes (notes) with the task's input, each with the
// node's tool for it, when the agent has that tool. How many of each is
// actors.ContextOptions' Evidence, Recall and Notes: the agent's own
// (NamedAgent.Context), else the node's (Config.Context), where 0 is the default
// and actors.GatherOff none. The defaults: actors.DefaultEvidence chunks for an
// agent with a knowledge base (NamedAgent.Knowledge, else KnowledgeTool.Base) and
// the rag tool; actors.DefaultRecall memories for an agent with the memory tool;
// no notes.

// gatherSources returns the sources an agent with these tools, knowledge base
// and memory namespace ("" for the node's) gathers from: the node's rag, memory
// and notes tools that are among its tools.
func (c Config) gatherSources(specs []messages.ToolSpec, base, namespace string) actors.ContextSources {
	has := func(name string) bool {
		return slices.ContainsFunc(specs, func(s messages.ToolSpec) bool { return s.Name == name })
	}
	var src actors.ContextSources
	if kt := c.KnowledgeTool; kt != nil {
		name := cmp.Or(kt.Name, "rag")
		if base = cmp.Or(base, kt.Base); base != "" && has(name) {
			src.KnowledgeTool, src.KnowledgeBase = name, base
		}
	}
	if mt := c.MemoryTool; mt != nil {
		name, search := cmp.Or(mt.Name, "memory"), cmp.Or(mt.Name, "memory")
		if mt.Expand {
			search += "_search"
		}
		if has(search) {
			src.MemoryTool, src.MemoryExpanded, src.MemoryNamespace = name, mt.Expand, cmp.Or(namespace, mt.Namespace)
		}
	}
	if c.Notes != nil {
		search := "notes"
		if c.Notes.Expand {
			search = "notes_search"
		}
		if has(search) {
			src.NotesTool, src.NotesExpanded = "notes", c.Notes.Expand
		}
	}
	return src
}

// resolveGather sets agent a's sources and how many items of each it gathers:
// own's number (the agent's setting), else the node's, else the default. A
// number the agent sets for a source it does not have is an error; one it takes
// from the node is then 0.
func (c Config) resolveGather(a *actors.Agent, base, namespace string, own actors.ContextOptions, isDefault bool) error {
	a.Sources = c.gatherSources(a.Tools, base, namespace)
	resolve := func(field string, mine, node, def int, have bool, what string) (int, error) {
		n := cmp.Or(mine, node)
		switch {
		case n < 0:
			return 0, nil
		case n == 0 && have:
			return def, nil
		case n > 0 && !have && (mine > 0 || isDefault):
			return 0, fmt.Errorf("node: agent %q: context %s %d: the agent has no %s", a.Name, field, n, what)
		case !have:
			return 0, nil
		}
		return n, nil
	}
	node := c.Context
	if isDefault {
		node = actors.ContextOptions{}
	}
	var err error
	if a.Context.Evidence, err = resolve("evidence", own.Evidence, node.Evidence, actors.DefaultEvidence, a.Sources.KnowledgeTool != "",
		"knowledge base to search with the rag tool (a knowledge base of its own, or the rag tool's default, and the rag tool among its tools)"); err != nil {
		return err
	}
	if a.Context.Recall, err = resolve("recall", own.Recall, node.Recall, actors.DefaultRecall, a.Sources.MemoryTool != "",
		"memory to recall from (the node's memory tool among its tools)"); err != nil {
		return err
	}
	a.Context.Notes, err = resolve("notes", own.Notes, node.Notes, 0, a.Sources.NotesTool != "",
		"notes (the node's notes tool among its tools)")
	return err
}

// CheckGather reports a named agent (of Config.Agents) whose context settings
// gather from a source it does not have: evidence without a knowledge base and the
// rag tool, recall without the memory tool, notes without the notes tool.
func (c Config) CheckGather(name string) error {
	i := slices.IndexFunc(c.Agents, func(na NamedAgent) bool { return na.Name == name })
	if i < 0 {
		return fmt.Errorf("node: no agent %q", name)
	}
	na := c.Agents[i]
	def, err := c.Agent()
	if err != nil {
		return err
	}
	a := actors.Agent{Name: na.Name, Tools: def.Tools}
	if na.Tools != nil {
		a.Tools = slices.DeleteFunc(slices.Clone(def.Tools), func(s messages.ToolSpec) bool { return !slices.Contains(na.Tools, s.Name) })
	}
	return c.resolveGather(&a, na.Knowledge, na.MemoryNamespace, na.Context, false)
}
