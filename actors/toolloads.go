package actors

import (
	"encoding/json"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// ToolLoads is a session's loads folded as they are recorded: the loads in order,
// and the tool names and groups they loaded, each load read once (FoldToolLoads;
// SessionState folds its own as it applies their events). A request reads the sets,
// so what it costs does not grow with the number of loads the session made.
// Folding is a pure function of the loads, in order: a refold (recovery, replay)
// gives the same sets. A session's ToolLoads is its own and changes only as it
// folds; a disclosure reads it and must not keep it.
type ToolLoads struct {
	list   []ToolLoad
	names  map[string]struct{} // the tools the loads loaded ("loaded")
	groups map[string]struct{} // the groups load_tools loaded ("group")
}

// FoldToolLoads folds loads, in order.
func FoldToolLoads(loads []ToolLoad) *ToolLoads {
	l := &ToolLoads{}
	for _, tl := range loads {
		l.add(tl)
	}
	return l
}

// ToolLoadResult is what a load_tools or search_tools answer says, as the
// disclosure writes it (tools/disclosure): the group loaded (load_tools), the
// query (search_tools), the tools loaded, and a note for the model.
type ToolLoadResult struct {
	Group  string   `json:"group,omitempty"`
	Query  string   `json:"query,omitempty"`
	Loaded []string `json:"loaded"`
	Note   string   `json:"note"`
}

// ParseToolLoad reads a load's result; ok is false when it is not a ToolLoadResult
// (such a load loads nothing).
func ParseToolLoad(l ToolLoad) (r ToolLoadResult, ok bool) {
	if json.Unmarshal([]byte(l.Result), &r) != nil {
		return ToolLoadResult{}, false
	}
	return r, true
}

// add folds one more load.
func (l *ToolLoads) add(tl ToolLoad) {
	l.list = append(l.list, tl)
	r, ok := ParseToolLoad(tl)
	if !ok {
		return
	}
	for _, n := range r.Loaded {
		if l.names == nil {
			l.names = map[string]struct{}{}
		}
		l.names[n] = struct{}{}
	}
	if tl.Tool == ToolLoadTools && r.Group != "" {
		if l.groups == nil {
			l.groups = map[string]struct{}{}
		}
		l.groups[r.Group] = struct{}{}
	}
}

// Len returns how many loads were folded; 0 for nil.
func (l *ToolLoads) Len() int {
	if l == nil {
		return 0
	}
	return len(l.list)
}

// List returns the loads folded, in the order they were recorded; do not modify it.
func (l *ToolLoads) List() []ToolLoad {
	if l == nil {
		return nil
	}
	return l.list[:len(l.list):len(l.list)]
}

// Loaded reports whether a load named the tool.
func (l *ToolLoads) Loaded(tool string) bool {
	if l == nil {
		return false
	}
	_, ok := l.names[tool]
	return ok
}

// GroupLoaded reports whether load_tools loaded the group: its tools are offered
// whole, also the ones its server adds later.
func (l *ToolLoads) GroupLoaded(group string) bool {
	if l == nil {
		return false
	}
	_, ok := l.groups[group]
	return ok
}

// FoldedDisclosure is a ToolDisclosure that reads a session's loads folded
// (ToolLoads) rather than its list of loads: what a request costs it does not grow
// with the loads the session made. Agent.offer uses it when a disclosure has it.
type FoldedDisclosure interface {
	ToolDisclosure
	// DiscloseFolded returns what Disclose returns for the loads l folded
	// (l.List()) and catalog, byte for byte; l may be nil (no loads). It must not
	// modify or keep l.
	DiscloseFolded(l *ToolLoads, catalog []tools.Tool) (specs []messages.ToolSpec, section string)
}

// DiscloseLoads is d's disclosure for the folded loads l and catalog: d's
// DiscloseFolded when it has it, Disclose with the list of loads otherwise. A
// disclosure that wraps another calls it to keep the wrapped one's folded path.
func DiscloseLoads(d ToolDisclosure, l *ToolLoads, catalog []tools.Tool) ([]messages.ToolSpec, string) {
	if f, ok := d.(FoldedDisclosure); ok {
		return f.DiscloseFolded(l, catalog)
	}
	return d.Disclose(l.List(), catalog)
}
