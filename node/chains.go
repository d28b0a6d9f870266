package node

import (
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/vectorstore"

	"fmt"
	"slices"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/notes"
)

// chainTools builds Chains, each step calling one of available (the agent's tools,
// the notes' among them once the node added them) or a tool ToolCatalog owns; extra
// options follow (CheckPromptFits's catalog to come).
func (c Config) chainTools(available []tools.Tool, extra ...tools.ChainOption) ([]tools.Tool, error) {
	if len(c.Chains) == 0 {
		return nil, nil
	}
	var opts []tools.ChainOption
	if cat, ok := c.ToolCatalog.(tools.ChainCatalog); ok {
		opts = append(opts, tools.WithStepCatalog(cat))
	}
	opts = append(opts, extra...)
	cts, err := tools.NewChainTools(c.Chains, available, opts...)
	if err != nil {
		return nil, fmt.Errorf("node: chains: %w", err)
	}
	out := make([]tools.Tool, len(cts))
	for i, ct := range cts {
		out[i] = ct
	}
	return out, nil
}

// validateChains builds Chains as New will: against Tools (or their default), the
// skills' tools and, when Notes is set, the notes' tools, which New makes on the
// node's log.
func (c Config) validateChains() error {
	c.setDefaults()
	ts, err := c.withNotesSpecs()
	if err != nil {
		return err
	}
	_, err = c.chainTools(append(ts, c.Skills.Tools()...))
	return err
}

// withNotesSpecs returns Tools and, when Notes is set, the notes' tools made on a log
// that is never read (unless Notes names one): what an agent's specs and its
// chains' checks need, where New makes them on the node's log (addNotes). A notes
// tool Tools holds already (built by the caller on its log) is kept instead. The
// memory tool's (MemoryTool), the rag tool's (KnowledgeTool) and, with Agents, the
// delegate tool's specs follow.
func (c Config) withNotesSpecs() ([]tools.Tool, error) {
	ts, err := c.withNotesAndMemory()
	if err == nil {
		ts, err = c.withRAGSpecs(ts) // knowledgetool.go
	}
	if err != nil {
		return nil, err
	}
	// And the delegate tool, which a node with named agents has (delegate.go).
	return c.withDelegate(ts, nil)
}

// withNotesAndMemory is withNotesSpecs without the delegate tool.
func (c Config) withNotesAndMemory() ([]tools.Tool, error) {
	ts, err := c.withNotesOnly()
	if err != nil || c.MemoryTool == nil {
		return ts, err
	}
	maxContent := 0
	if c.Memory != nil {
		maxContent = c.Memory.MaxContentBytes
	}
	m, done, err := specMemories(maxContent)
	if err != nil {
		return nil, err
	}
	defer done()
	mt, err := m.Tools(*c.MemoryTool)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	byAgent := map[string][]tools.Tool{}
	for agent, tc := range c.agentMemoryConfigs() {
		if byAgent[agent], err = m.Tools(tc); err != nil {
			return nil, fmt.Errorf("node: agent %q: %w", agent, err)
		}
	}
	for _, t := range forAgents(mt, byAgent) {
		name := t.Spec().Name
		if !slices.ContainsFunc(ts, func(have tools.Tool) bool { return have.Spec().Name == name }) {
			ts = append(ts, t)
		}
	}
	return ts, nil
}

// specMemories returns memories on a log that is never read and an empty vector
// store in memory, whose tools give the memory tool's specs; done closes them.
func specMemories(maxContentBytes int) (m *memory.Memories, done func(), err error) {
	v, err := vectorstore.Open(vectorstore.Config{})
	if err != nil {
		return nil, nil, err
	}
	m, err = memory.Open(memory.Config{Log: unopenedLog{}, Vectors: v, MaxContentBytes: maxContentBytes})
	if err != nil {
		v.Close()
		return nil, nil, fmt.Errorf("node: %w", err)
	}
	return m, func() { v.Close() }, nil
}

// MemoryToolSpecs returns the memory tool of tc on memories that are never read:
// its specs, for listing it or checking chains over it. Calling it fails.
func MemoryToolSpecs(tc memory.ToolConfig, maxContentBytes int) ([]tools.Tool, error) {
	m, done, err := specMemories(maxContentBytes)
	if err != nil {
		return nil, err
	}
	defer done()
	return m.Tools(tc)
}

// NotesToolSpecs returns the notes tools of cfg made on a log that is never read
// (unless cfg names one): their specs, for listing them or checking chains over
// them. Calling one fails.
func NotesToolSpecs(cfg notes.Config) ([]tools.Tool, error) {
	if cfg.Log == nil {
		cfg.Log = unopenedLog{}
	}
	ns, err := notes.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	ts, err := ns.Tools()
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return ts, nil
}

// withNotesOnly is withNotesSpecs without the memory tool.
func (c Config) withNotesOnly() ([]tools.Tool, error) {
	if c.Notes == nil {
		return c.Tools, nil
	}
	ts, err := NotesToolSpecs(*c.Notes)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(c.Tools)
	for _, t := range ts {
		name := t.Spec().Name
		if !slices.ContainsFunc(c.Tools, func(have tools.Tool) bool { return have.Spec().Name == name }) {
			out = append(out, t)
		}
	}
	return out, nil
}

// unopenedLog stands in for the log New opens where only the notes tools' specs are
// needed: making them reads no log, and calling it panics.
type unopenedLog struct{ eventlog.Log }
