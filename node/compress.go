package node

import (
	"cmp"

	"github.com/troupe-run/troupe/actors"
)

// compression returns an agent's conversation compression: its own, or def when it
// sets no strategy (a named agent takes the default agent's), with the node's
// memory tool filled in for an extract that writes its facts to a core block
// (actors.Compression.MemoryBlock). An agent without that tool keeps its facts in
// its context's State section only.
func (c Config) compression(own, def actors.Compression) actors.Compression {
	out := own
	if own.Strategy == "" {
		out = def
	}
	if out.MemoryBlock != "" && c.MemoryTool != nil {
		out.MemoryTool, out.Expanded = cmp.Or(c.MemoryTool.Name, "memory"), c.MemoryTool.Expand
	}
	return out
}
