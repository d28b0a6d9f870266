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
// the notes' among them once the node added them) or a tool ToolCatalog owns.
func (c Config) chainTools(available []tools.Tool) ([]tools.Tool, error) {
	if len(c.Chains) == 0 {
		return nil, nil
	}
	var opts []tools.ChainOption
	if cat, ok := c.ToolCatalog.(tools.ChainCatalog); ok {
		opts = append(opts, tools.WithStepCatalog(cat))
	}
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
	// The memory tool's specs, from memories on a log that is never read.
	v, err := vectorstore.Open(vectorstore.Config{})
	if err != nil {
		return nil, err
	}
	defer v.Close()
	mc := memory.Config{Log: unopenedLog{}, Vectors: v}
	if c.Memory != nil {
		mc.MaxContentBytes = c.Memory.MaxContentBytes
	}
	m, err := memory.Open(mc)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
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

// withNotesOnly is withNotesSpecs without the memory tool.
func (c Config) withNotesOnly() ([]tools.Tool, error) {
	if c.Notes == nil {
		return c.Tools, nil
	}
	nc := *c.Notes
	if nc.Log == nil {
		nc.Log = unopenedLog{}
	}
	ns, err := notes.New(nc)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	ts, err := ns.Tools()
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
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
