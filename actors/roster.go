package actors

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// An agent's roster is what its tools and paradigm say of the node's other agents:
// the delegate tool's description and the enum of its schema (NewDelegateTool), a
// planner's list of the agents a step may name (PlanAgents), a team's members
// (their descriptions and tools, in its routing prompt and its members' briefs).
// They follow the node's agents, not the agent's own configuration, so from
// decision rules 10 (rulesRoster) a task records them with its configuration
// (messages.AgentConfig's Roster, Members, and a reflection's CriticPrompt:
// configOf) and renders them from what it recorded (withRoster): an agents file
// that gains an agent, or another agent's description edited, changes no prompt
// of a task recorded before (a call in flight is made again with the prompt its
// model.requested recorded, and replay verify does not diverge). Under older
// rules they are rendered from the node's agents.

// MaxDelegateResult bounds, in bytes, the answer a delegate call returns: a
// longer one is cut, with a note that says so and names the child session (the
// delegate tool's description says so).
const MaxDelegateResult = 8 << 10

// MaxDelegationDepth bounds the nesting of sub-agents: a child of a session that
// is no child is 1 deep, its own child 2, and a session MaxDelegationDepth deep
// cannot delegate (the call is an error). A fork of a child session is no
// child, and as deep as that child (TaskDepth).
const MaxDelegationDepth = 4

// TaskDepth is how deep a sub-agent the session of task t is: its parent's
// depth (messages.ParentRef.Depth) on a child's task; the depth it keeps
// (messages.TaskSubmitted.Depth) on a task with no parent: a fork of a child's
// session, and a later task of a session that is a sub-agent (the session
// stamps its depth on each new task: SessionState.Depth); 0 on any other task,
// and on one recorded before tasks kept a depth. A delegate call of t starts a
// child TaskDepth(t)+1 deep. A depth out of its range, which no node records
// (ingress refuses it) but an imported session may hold, reads as the nearest
// in range: a child's 1 to MaxDelegationDepth, another task's 0 to
// MaxDelegationDepth. A parent's depth of 0 or below would otherwise give the
// tree under it that many more levels.
func TaskDepth(t *messages.TaskSubmitted) int {
	if t.Parent != nil {
		return min(max(t.Parent.Depth, 1), MaxDelegationDepth)
	}
	return min(max(t.Depth, 0), MaxDelegationDepth)
}

// DelegateArgs are the arguments of a delegate call, in the order they are encoded.
type DelegateArgs struct {
	Agent string `json:"agent" jsonschema:"the sub-agent to hand the task to" tool:"required"`
	Task  string `json:"task" jsonschema:"the task, complete in itself: the sub-agent sees nothing else of this conversation" tool:"required,minLength=1"`
}

// NewDelegateTool returns the delegate tool whose calls perform performs: its
// schema names the agents of roster in an enum, and its description says what
// each does, so that a node and replay verification (or a task under its recorded
// roster) offer the same bytes for the same roster. opts are the tool's others.
func NewDelegateTool(roster []messages.RosterAgent, perform func(context.Context, DelegateArgs) (string, error), opts ...tools.Option) (*tools.FuncTool, error) {
	names := make([]any, len(roster))
	var list strings.Builder
	for i, a := range roster {
		names[i] = a.Name
		list.WriteString("\n- " + a.Name)
		if d := strings.TrimSpace(a.Description); d != "" {
			list.WriteString(": " + strings.Join(strings.Fields(d), " "))
		}
	}
	desc := fmt.Sprintf("Hand a task to a sub-agent. It works in a session of its own, with a clean context (it sees only the task "+
		"you give it, so say everything it needs) and its own limits, and its final answer is this call's result (at most %d KiB: "+
		"a longer one is cut, with a note). If it fails, the call fails with its reason. The sub-agents:%s", MaxDelegateResult>>10, list.String())
	schema := tools.WithSchemaFunc(func(s *jsonschema.Schema) {
		if p := s.Properties["agent"]; p != nil {
			p.Enum = names
		}
	})
	return tools.Func(DelegateTool, desc, perform, append([]tools.Option{schema}, opts...)...)
}

// delegateSpec returns the spec of the delegate tool of roster, its parameters
// compacted as a registry's are.
func delegateSpec(roster []messages.RosterAgent) (messages.ToolSpec, error) {
	t, err := NewDelegateTool(roster, func(context.Context, DelegateArgs) (string, error) {
		return "", errors.New("delegate: only its spec is rendered")
	})
	if err != nil {
		return messages.ToolSpec{}, err
	}
	s := t.Spec()
	var buf bytes.Buffer
	if json.Compact(&buf, s.Parameters) == nil {
		s.Parameters = buf.Bytes()
	}
	return s, nil
}

// PlanAgents returns the agents a step of the plan of agent self may name, with
// what each does (PlanExecute.Agents): the default agent, and the agents of
// roster but self.
func PlanAgents(self string, roster []messages.RosterAgent) map[string]string {
	out := map[string]string{"default": "the node's own agent, with all its tools"}
	for _, o := range roster {
		if o.Name != self {
			out[o.Name] = cmp.Or(o.Description, "(no description)")
		}
	}
	return out
}

// rosterOf returns what of a's roster a task records (configOf, from rulesRoster):
// the node's agents when a has the delegate tool, a team's members, a
// reflection's critic's rubric.
func (a *Agent) rosterOf(c *messages.AgentConfig) {
	if slices.ContainsFunc(a.Tools, func(s messages.ToolSpec) bool { return s.Name == DelegateTool }) && len(a.Roster) > 0 {
		c.Roster = slices.Clone(a.Roster)
	}
	switch p := a.Paradigm.(type) {
	case *team:
		c.Members = make([]messages.RosterAgent, len(p.cfg.Members))
		for i, m := range p.cfg.Members {
			c.Members[i] = messages.RosterAgent{Name: m.Name, Description: m.Description, Tools: slices.Clone(m.Tools)}
		}
	case Reflection:
		c.CriticPrompt = cmp.Or(p.CriticPrompt, DefaultCriticPrompt)
	}
}

// withRoster returns a with what its tools and paradigm say of the node's agents
// rendered from c, a configuration recorded under rulesRoster or later, rather
// than from the node's agents now: the delegate tool's spec (delegate, rendered
// from c.Roster), a planner's agents, a team's members, a reflection's critic's
// rubric. What c does not hold is left as it is.
func (a Agent) withRoster(c *messages.AgentConfig, delegate *messages.ToolSpec) Agent {
	if c.Roster != nil && delegate != nil {
		if i := slices.IndexFunc(a.Tools, func(s messages.ToolSpec) bool { return s.Name == DelegateTool }); i >= 0 {
			a.Tools = slices.Clone(a.Tools)
			a.Tools[i] = *delegate
		}
		if b, ok := a.Disclosure.(BoundedDisclosure); ok {
			a.Disclosure = rosterBoundedDisclosure{rosterDisclosure{ToolDisclosure: b, delegate: *delegate}, b}
		} else if a.Disclosure != nil {
			a.Disclosure = rosterDisclosure{ToolDisclosure: a.Disclosure, delegate: *delegate}
		}
		if pe, ok := a.Paradigm.(PlanExecute); ok && pe.Agents != nil {
			pe.Agents = PlanAgents(a.Name, c.Roster)
			a.Paradigm = pe
		}
	}
	switch p := a.Paradigm.(type) {
	case *team:
		if c.Members != nil {
			t := *p
			t.cfg.Members = slices.Clone(t.cfg.Members)
			for i, m := range t.cfg.Members {
				if j := slices.IndexFunc(c.Members, func(r messages.RosterAgent) bool { return r.Name == m.Name }); j >= 0 {
					t.cfg.Members[i].Description, t.cfg.Members[i].Tools = c.Members[j].Description, c.Members[j].Tools
				}
			}
			a.Paradigm = &t
		}
	case Reflection:
		if c.CriticPrompt != "" {
			p.CriticPrompt = c.CriticPrompt
			a.Paradigm = p
		}
	}
	return a
}

// rosterDisclosure is a disclosure that offers the delegate tool as a task's
// recorded roster renders it (withRoster).
type rosterDisclosure struct {
	ToolDisclosure
	delegate messages.ToolSpec
}

// Disclose implements ToolDisclosure: a pure function of its arguments, as the
// wrapped disclosure's.
func (d rosterDisclosure) Disclose(loads []ToolLoad, catalog []tools.Tool) ([]messages.ToolSpec, string) {
	return d.withDelegate(d.ToolDisclosure.Disclose(loads, catalog))
}

// DiscloseFolded implements FoldedDisclosure: Disclose, from the folded loads.
func (d rosterDisclosure) DiscloseFolded(loads *ToolLoads, catalog []tools.Tool) ([]messages.ToolSpec, string) {
	return d.withDelegate(DiscloseLoads(d.ToolDisclosure, loads, catalog))
}

// withDelegate returns specs with the delegate tool as the roster renders it.
func (d rosterDisclosure) withDelegate(specs []messages.ToolSpec, section string) ([]messages.ToolSpec, string) {
	if i := slices.IndexFunc(specs, func(s messages.ToolSpec) bool { return s.Name == DelegateTool }); i >= 0 {
		specs = slices.Clone(specs)
		specs[i] = d.delegate
	}
	return specs, section
}

// rosterBoundedDisclosure is a rosterDisclosure of a BoundedDisclosure, whose
// bounded section (tool names only: the roster is not in it) is the wrapped one's.
type rosterBoundedDisclosure struct {
	rosterDisclosure
	bounded BoundedDisclosure
}

// BoundedSection implements BoundedDisclosure.
func (d rosterBoundedDisclosure) BoundedSection(catalog []tools.Tool) string {
	return d.bounded.BoundedSection(catalog)
}
