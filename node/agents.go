package node

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// Paradigms a NamedAgent runs.
const (
	// ParadigmFunctionCalling is the default agent's loop: the model calls tools
	// natively when it can (through the ReAct text protocol when it cannot).
	ParadigmFunctionCalling = "function_calling"
	// ParadigmReAct is the same loop with the ReAct text protocol even for a model
	// that calls tools natively (package llm/react).
	ParadigmReAct = "react"
	// ParadigmSimple is one model call offered no tools: its reply's text is the
	// task's answer (actors.Agent.SingleCall).
	ParadigmSimple = "simple"
)

// AgentNameRule says which names an agent may have, for error messages.
const AgentNameRule = "1 to 64 lower-case letters, digits, '_' or '-', starting with a letter"

var agentNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

// NamedAgent is an agent a task may name (Task.Agent) besides "default": an agents
// file's (internal/nodeconfig). Its empty fields are the default agent's.
type NamedAgent struct {
	Name        string
	Description string
	// SystemPrompt opens its conversations ("": Config.SystemPrompt).
	SystemPrompt string
	// Paradigm is ParadigmFunctionCalling ("" too), ParadigmReAct or ParadigmSimple
	// (which offers no tools, whatever Tools says).
	Paradigm string
	// Tools are the names of the tools it may call, among the node's (Tools, the
	// skills', the chains', the notes' and the memory tool's): it is offered these
	// only, all at once. Nil: every tool of the default agent, offered as the
	// default agent's are (Disclosure, ToolCatalog); empty: none.
	Tools []string
	// MaxSteps bounds the model calls of its tasks (0: Config.MaxSteps).
	MaxSteps int

	// Stop conditions (actors.Agent's; 0: the default agent's).

	// MaxTokens is the token budget of its tasks that set none (Task.MaxTokens), at
	// most MaxTokenBudget.
	MaxTokens int
	// LoopRepeats and LoopStaleSteps tune its loop detection; actors.LoopOff turns a
	// check off.
	LoopRepeats    int
	LoopStaleSteps int
	// Team, when set, makes it a team (package actors, Team) of other agents of
	// Config.Agents, named in Team.Members (by name: the node adds each member's
	// description and tools) and in its aggregator, judge and critic. A team has no
	// Paradigm nor Tools of its own: it hands its members their work with the
	// delegate tool, and its own model calls are its routing decisions.
	Team *actors.Team
}

func (a NamedAgent) validate() error {
	switch {
	case !agentNamePattern.MatchString(a.Name) || a.Name == "default":
		return fmt.Errorf("node: agent %q: want %s, not \"default\"", a.Name, AgentNameRule)
	case a.Paradigm != "" && a.Paradigm != ParadigmFunctionCalling && a.Paradigm != ParadigmReAct && a.Paradigm != ParadigmSimple:
		return fmt.Errorf("node: agent %q: unknown paradigm %q: want %s, %s or %s", a.Name, a.Paradigm, ParadigmFunctionCalling, ParadigmReAct, ParadigmSimple)
	case a.MaxSteps < 0 || a.MaxSteps > 1000:
		return fmt.Errorf("node: agent %q: max_steps must be between 0 and 1000", a.Name)
	case a.Team != nil && (a.Paradigm != "" || a.Tools != nil):
		return fmt.Errorf("node: team %q: a team has no paradigm nor tools of its own: its members have them", a.Name)
	}
	return checkStops(fmt.Sprintf("agent %q", a.Name), a.MaxTokens, a.LoopRepeats, a.LoopStaleSteps)
}

// checkStops checks the stop conditions of an agent (who names it in the error).
func checkStops(who string, maxTokens, loopRepeats, loopStaleSteps int) error {
	switch {
	case maxTokens < 0 || maxTokens > MaxTokenBudget:
		return fmt.Errorf("node: %s: max_tokens must be between 0 and %d", who, MaxTokenBudget)
	case loopRepeats < actors.LoopOff || loopRepeats == 1 || loopRepeats > 1000:
		return fmt.Errorf("node: %s: loop_repeats must be 0 (the default, %d), actors.LoopOff (off) or between 2 and 1000", who, actors.DefaultLoopRepeats)
	case loopStaleSteps < actors.LoopOff || loopStaleSteps > 1000:
		return fmt.Errorf("node: %s: loop_stale_steps must be 0 (the default, %d), actors.LoopOff (off) or between 1 and 1000", who, actors.DefaultLoopStaleSteps)
	}
	return nil
}

// team builds the paradigm of the team na from the agents of the configuration:
// its members (with their descriptions and tools, for its prompts) and the other
// agents it names must be agents of Agents that are not teams.
func (c Config) team(na NamedAgent, reg *tools.Registry) (actors.Paradigm, error) {
	tm := *na.Team
	agent := func(role, name string) (NamedAgent, error) {
		i := slices.IndexFunc(c.Agents, func(a NamedAgent) bool { return a.Name == name })
		if i < 0 || c.Agents[i].Team != nil {
			return NamedAgent{}, fmt.Errorf("node: team %q: %s %q is no agent of the node (a team's members are agents, not teams)", na.Name, role, name)
		}
		return c.Agents[i], nil
	}
	tm.Members = slices.Clone(tm.Members)
	for i, m := range tm.Members {
		a, err := agent("member", m.Name)
		if err != nil {
			return nil, err
		}
		tm.Members[i].Description = a.Description
		tm.Members[i].Tools = a.Tools
		if a.Tools == nil {
			tm.Members[i].Tools = reg.Names()
		}
	}
	for _, n := range []struct{ role, name string }{{"aggregator", tm.Aggregator}, {"judge", tm.Judge}, {"critic", tm.Check.Critic}} {
		if n.name != "" {
			if _, err := agent(n.role, n.name); err != nil {
				return nil, err
			}
		}
	}
	p, err := actors.NewTeam(tm)
	if err != nil {
		return nil, fmt.Errorf("node: team %q: %s", na.Name, strings.TrimPrefix(err.Error(), "team: "))
	}
	return p, nil
}

// namedAgents builds the agents of Agents from the default agent and the registry of
// the node's tools.
func (c Config) namedAgents(def actors.Agent, reg *tools.Registry) (map[string]actors.Agent, error) {
	if len(c.Agents) == 0 {
		return nil, nil
	}
	named := make(map[string]actors.Agent, len(c.Agents))
	for _, na := range c.Agents {
		if na.Team != nil {
			a, err := c.teamAgent(def, na, reg)
			if err != nil {
				return nil, err
			}
			named[na.Name] = a
			continue
		}
		a := def
		a.Name = na.Name
		// The skills' section, as the default agent's, when it has their tools.
		a.SystemPrompt = cmp.Or(na.SystemPrompt, c.SystemPrompt)
		if section := c.Skills.PromptSection(); section != "" && na.Tools == nil {
			a.SystemPrompt += "\n\n" + strings.TrimSuffix(section, "\n")
		}
		if na.MaxSteps > 0 {
			a.MaxSteps = na.MaxSteps
		}
		if na.Paradigm == ParadigmReAct {
			a.Protocol = llm.ProtocolReAct
		}
		// Stop conditions: the agent's own, else the default agent's.
		a.MaxTokens = cmp.Or(na.MaxTokens, a.MaxTokens)
		a.LoopRepeats = cmp.Or(na.LoopRepeats, a.LoopRepeats)
		a.LoopStaleSteps = cmp.Or(na.LoopStaleSteps, a.LoopStaleSteps)
		if na.Paradigm == ParadigmSimple {
			// One call, no tools: nor the skills' section that tells of them.
			a.SingleCall, a.SystemPrompt = true, cmp.Or(na.SystemPrompt, c.SystemPrompt)
			a.Tools, a.Disclosure, a.Catalog, a.Chains = nil, nil, nil, nil
			named[na.Name] = a
			continue
		}
		if na.Tools != nil {
			for _, name := range na.Tools {
				if _, ok := reg.Get(name); !ok {
					return nil, fmt.Errorf("node: agent %q: unknown tool %q: the node's tools are %v", na.Name, name, reg.Names())
				}
			}
			// The registry's order (by name), so the tool section is stable.
			a.Tools = slices.DeleteFunc(slices.Clone(reg.Specs()), func(s messages.ToolSpec) bool { return !slices.Contains(na.Tools, s.Name) })
			a.Disclosure, a.Catalog, a.Chains = nil, nil, nil
			for name, ch := range def.Chains {
				if slices.Contains(na.Tools, name) {
					if a.Chains == nil {
						a.Chains = map[string]*tools.ChainTool{}
					}
					a.Chains[name] = ch
				}
			}
		}
		named[na.Name] = a
	}
	return named, nil
}

// teamAgent is the agent that runs the team na: the default agent's model, the
// team's system prompt (for its routing calls), and the delegate tool alone.
func (c Config) teamAgent(def actors.Agent, na NamedAgent, reg *tools.Registry) (actors.Agent, error) {
	p, err := c.team(na, reg)
	if err != nil {
		return actors.Agent{}, err
	}
	i := slices.IndexFunc(reg.Specs(), func(s messages.ToolSpec) bool { return s.Name == actors.DelegateTool })
	if i < 0 {
		return actors.Agent{}, fmt.Errorf("node: team %q: a team hands its members their work with the %s tool, which this node does not have", na.Name, actors.DelegateTool)
	}
	a := def
	a.Name, a.Paradigm = na.Name, p
	a.SystemPrompt = cmp.Or(na.SystemPrompt, c.SystemPrompt)
	if na.MaxSteps > 0 {
		a.MaxSteps = na.MaxSteps
	}
	a.Tools = reg.Specs()[i : i+1]
	a.Disclosure, a.Catalog, a.Chains, a.Protocol = nil, nil, nil, ""
	return a, nil
}
