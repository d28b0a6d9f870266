package node

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
	"github.com/troupe-run/troupe/tools/skills"
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
	// ParadigmReflection has each answer of the loop critiqued and revised
	// (actors.Reflection).
	ParadigmReflection = "reflection"
	// ParadigmReflexion keeps lessons of the tasks that went wrong in memory and
	// puts those of similar tasks in the prompt (actors.Reflexion); it needs the
	// memory tool (Config.MemoryTool).
	ParadigmReflexion = "reflexion"
	// ParadigmPlanExecute plans a task as a DAG of steps, runs them in parallel and
	// joins their results (actors.PlanExecute); NamedAgent.PlanExecute sets it up.
	ParadigmPlanExecute = "plan_execute"
)

// Paradigms are the paradigms a NamedAgent may run.
var Paradigms = []string{ParadigmFunctionCalling, ParadigmReAct, ParadigmSimple, ParadigmReflection, ParadigmReflexion, ParadigmPlanExecute}

// MaxReflectionRounds bounds NamedAgent.MaxRounds.
const MaxReflectionRounds = 10

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
	// Paradigm is one of Paradigms ("": ParadigmFunctionCalling); ParadigmSimple
	// offers no tools, whatever Tools says.
	Paradigm string
	// MaxRounds bounds a reflection's critiques (0: 2); CriticPrompt is its
	// critic's rubric ("": actors.DefaultCriticPrompt). Reflection's only.
	MaxRounds    int
	CriticPrompt string
	// CriticModel, when set, is the model a reflection's critiques go to instead of
	// the agent's: a chain of its own of the node's gateway, as Model is.
	CriticModel llm.Model
	// LessonsNamespace is the memory namespace of a reflexion's lessons ("":
	// "lessons:<name>"; the node's memory tool is allowed it), Lessons how many it
	// puts in a prompt (0: 3), Evaluate whether an evaluator judges its answers (a
	// poor one is learnt from, as a failure is). Reflexion's only.
	LessonsNamespace string
	Lessons          int
	Evaluate         bool
	// EvaluatorPrompt is a reflexion's evaluator's rubric ("":
	// actors.DefaultEvaluatorPrompt).
	EvaluatorPrompt string
	// PlanExecute are the plan_execute paradigm's settings (its zero value: the
	// defaults); its Agents are filled in: the node's other agents, when the agent
	// has the delegate tool. Set only for ParadigmPlanExecute.
	PlanExecute actors.PlanExecute
	// Tools are the names of the tools it may call, among the node's (Tools, the
	// skills', the chains', the notes' and the memory tool's): it is offered these
	// only, all at once. Nil: every tool of the default agent, offered as the
	// default agent's are (Disclosure, ToolCatalog); empty: none.
	Tools []string
	// MaxSteps bounds the model calls of its tasks (0: Config.MaxSteps).
	MaxSteps int
	// Model, when set, is the model its calls go to instead of Config.Model, and
	// Fallbacks those tried in order when it fails (Config.Fallbacks are not): one
	// chain of the node's gateway (gateway.Config.Routes), through its retries,
	// quotas, caches and prices. A model is told by its name: two models of one name
	// are one (Config.Model's, or the first agent's). ModelRequested records Model's
	// name.
	Model     llm.Model
	Fallbacks []llm.Model
	// MCPServers, with Tools, gives it every tool of these MCP servers of
	// Config.ToolCatalog (tools named "<server>__<tool>"), read at each request, as
	// the servers' tool lists change.
	MCPServers []string
	// Skills, with Tools, gives it these skills of Config.Skills: the skill tools
	// (load_skill, read_skill_file, run_skill_script), which serve it these skills
	// only, and these skills in its system prompt.
	Skills []string
	// MemoryNamespace, when set, is the default namespace of its memory tool (which
	// needs Config.MemoryTool, whose other settings it keeps) and of its core blocks
	// and write after task, instead of Config.MemoryTool.Namespace.
	MemoryNamespace string
	// Knowledge, when set, is the default knowledge base of its rag tool (which
	// needs Config.KnowledgeTool, whose other settings it keeps), instead of
	// Config.KnowledgeTool.Base.
	Knowledge string

	// Stop conditions (actors.Agent's; 0: the default agent's).

	// MaxTokens is the token budget of its tasks that set none (Task.MaxTokens), at
	// most MaxTokenBudget. As an agent's budget covers what its sub-agents spend, a
	// team's covers its whole task: its own model calls (an orchestrator's routing)
	// and its members' work, each member handed what is left of it; once it is
	// spent the team starts no member, and its task, unless it has an answer, ends
	// with token_budget (not member_failed, when a member whose share ran out
	// ended its pattern).
	MaxTokens int
	// MaxCostUSD is the cost budget, in US dollars, of its tasks that set none
	// (Task.MaxCostUSD), at most MaxCostBudget; a team's covers its members', as
	// MaxTokens does.
	MaxCostUSD float64
	// MaxSubAgents bounds the sub-agents (child sessions: its delegate calls, a
	// team's hand-overs to its members) one of its tasks starts itself, at most
	// MaxSubAgentsBound; 0: the default agent's (Config.MaxSubAgents, else
	// DefaultMaxSubAgents). A delegate call past it is an error result.
	MaxSubAgents int
	// LoopRepeats and LoopStaleSteps tune its loop detection; actors.LoopOff turns a
	// check off. A team has none: loop detection judges a model's tool calls, and a
	// team's hand-overs are its pattern's (its members' own loops have theirs).
	LoopRepeats    int
	LoopStaleSteps int
	// Context bounds what its model calls are sent (actors.ContextOptions); a zero
	// field is the default agent's (Config.Context). A team's bounds its own calls
	// (its routing): it takes no Evidence, Recall nor Notes, since it gathers
	// nothing (its members do).
	Context actors.ContextOptions
	// SummaryModel, when set, is the model its context compression's own calls
	// (summaries, digests, extractions) go to: a chain of one of the node's
	// gateway, as CriticModel is; Context.Compression.Model names it.
	SummaryModel llm.Model
	// Team, when set, makes it a team (package actors, Team) of other agents of
	// Config.Agents, named in Team.Members (by name: the node adds each member's
	// description and tools) and in its aggregator, judge and critic. A team has no
	// Paradigm nor Tools of its own: it hands its members their work with the
	// delegate tool, and its own model calls are its routing decisions.
	Team *actors.Team

	// Approvals are the tools among Tools whose calls wait for a human's approval
	// before they are performed (actors.Agent.Approvals): answered through
	// Node.Approve, POST /v1/sessions/{id}/approvals/{call} or a task.approval
	// message on troupe.tasks.
	Approvals []string
	// ApprovalTimeout rejects a call still waiting for approval this long after it
	// was requested: 0 takes Config.ApprovalTimeout, NoApprovalTimeout waits for ever.
	// A team has neither: its hand-overs wait for no approval (its members' calls
	// wait for theirs).
	ApprovalTimeout time.Duration
}

// models returns the names of the agent's chain of models (nil: the node's).
func (a NamedAgent) models() []string {
	if a.Model == nil {
		return nil
	}
	out := []string{a.Model.Name()}
	for _, m := range a.Fallbacks {
		out = append(out, m.Name())
	}
	return out
}

// NoApprovalTimeout is a NamedAgent.ApprovalTimeout that waits for ever for an
// answer, whatever Config.ApprovalTimeout says.
const NoApprovalTimeout time.Duration = -1

func (a NamedAgent) validate() error {
	switch {
	case !agentNamePattern.MatchString(a.Name) || a.Name == "default":
		return fmt.Errorf("node: agent %q: want %s, not \"default\"", a.Name, AgentNameRule)
	case a.Paradigm != "" && !slices.Contains(Paradigms, a.Paradigm):
		return fmt.Errorf("node: agent %q: unknown paradigm %q: want one of %s", a.Name, a.Paradigm, strings.Join(Paradigms, ", "))
	case a.Paradigm != ParadigmPlanExecute && !reflect.DeepEqual(a.PlanExecute, actors.PlanExecute{}):
		return fmt.Errorf("node: agent %q: plan_execute settings on an agent of the %s paradigm", a.Name, cmp.Or(a.Paradigm, ParadigmFunctionCalling))
	case a.PlanExecute.Concurrency < 0 || a.PlanExecute.MaxPlanSteps < 0 || a.PlanExecute.MaxReplans < 0 || a.PlanExecute.MaxPlanRetries < 0 ||
		a.PlanExecute.MaxDepth < 0 || a.PlanExecute.MaxTotalSteps < 0:
		return fmt.Errorf("node: agent %q: a plan_execute bound is negative", a.Name)
	case a.MaxSteps < 0 || a.MaxSteps > 1000:
		return fmt.Errorf("node: agent %q: max_steps must be between 0 and 1000", a.Name)
	case a.MaxRounds < 0 || a.MaxRounds > MaxReflectionRounds:
		return fmt.Errorf("node: agent %q: max_rounds must be between 0 and %d", a.Name, MaxReflectionRounds)
	case a.Paradigm != ParadigmReflection && (a.MaxRounds != 0 || a.CriticPrompt != "" || a.CriticModel != nil):
		return fmt.Errorf("node: agent %q: max_rounds, critic_prompt and critic_model are the reflection paradigm's, not %s's", a.Name, cmp.Or(a.Paradigm, ParadigmFunctionCalling))
	case a.Lessons < 0 || a.Lessons > 20:
		return fmt.Errorf("node: agent %q: lessons must be between 0 and 20", a.Name)
	case a.Paradigm != ParadigmReflexion && (a.LessonsNamespace != "" || a.Lessons != 0 || a.Evaluate || a.EvaluatorPrompt != ""):
		return fmt.Errorf("node: agent %q: lessons_namespace, lessons, evaluate and evaluator_prompt are the reflexion paradigm's, not %s's", a.Name, cmp.Or(a.Paradigm, ParadigmFunctionCalling))
	case a.LessonsNamespace != "" && memory.CheckNamespace(a.LessonsNamespace) != nil:
		return fmt.Errorf("node: agent %q: lessons_namespace: %w", a.Name, memory.CheckNamespace(a.LessonsNamespace))
	case a.Model == nil && len(a.Fallbacks) > 0:
		return fmt.Errorf("node: agent %q: fallbacks without a model", a.Name)
	case slices.Contains(a.Fallbacks, nil):
		return fmt.Errorf("node: agent %q: a fallback is nil", a.Name)
	case a.Tools == nil && (len(a.MCPServers) > 0 || len(a.Skills) > 0):
		return fmt.Errorf("node: agent %q: MCPServers and Skills need Tools (nil Tools: every tool of the node already)", a.Name)
	case a.Team != nil && (a.Paradigm != "" || a.Tools != nil):
		return fmt.Errorf("node: team %q: a team has no paradigm nor tools of its own: its members have them", a.Name)
	case a.Team != nil && (a.Context.Evidence != 0 || a.Context.Recall != 0 || a.Context.Notes != 0):
		return fmt.Errorf("node: team %q: context evidence, recall and notes: a team gathers nothing, its members do (set them on its members)", a.Name)
	case a.Team != nil && (a.LoopRepeats != 0 || a.LoopStaleSteps != 0):
		return fmt.Errorf("node: team %q: loop_repeats %d, loop_stale_steps %d: loop detection judges a model's tool calls, and a team's hand-overs are its pattern's: set them on its members", a.Name, a.LoopRepeats, a.LoopStaleSteps)
	case a.Team != nil && (len(a.Approvals) > 0 || a.ApprovalTimeout != 0):
		return fmt.Errorf("node: team %q: approvals %v, approval timeout %s: a team's hand-overs wait for no approval: set them on its members, whose tool calls do", a.Name, a.Approvals, a.ApprovalTimeout)
	case a.ApprovalTimeout < 0 && a.ApprovalTimeout != NoApprovalTimeout:
		return fmt.Errorf("node: agent %q: approval timeout %s is negative: want 0 (the node's) or more, or NoApprovalTimeout", a.Name, a.ApprovalTimeout)
	}
	for _, t := range a.Approvals {
		if !slices.Contains(a.Tools, t) {
			return fmt.Errorf("node: agent %q: tool %q needs approval but is not among its tools %v", a.Name, t, a.Tools)
		}
	}
	if a.Knowledge != "" {
		if err := knowledge.CheckName(a.Knowledge); err != nil {
			return fmt.Errorf("node: agent %q: knowledge base: %w", a.Name, err)
		}
	}
	if a.MemoryNamespace != "" {
		if err := memory.CheckNamespace(a.MemoryNamespace); err != nil {
			return fmt.Errorf("node: agent %q: memory namespace: %w", a.Name, err)
		}
	}
	if err := a.Context.ValidateFields(); err != nil { // its 0 fields are the default agent's
		if a.Team != nil {
			return fmt.Errorf("node: team %q: %w", a.Name, err)
		}
		return fmt.Errorf("node: agent %q: %w", a.Name, err)
	}
	who := fmt.Sprintf("agent %q", a.Name)
	if a.Team != nil {
		who = fmt.Sprintf("team %q", a.Name)
	}
	if err := checkCost(who, a.MaxCostUSD); err != nil {
		return err
	}
	if err := checkSubAgents(who, a.MaxSubAgents); err != nil {
		return err
	}
	if a.Team != nil && a.MaxSubAgents > 0 && a.MaxSubAgents < a.Team.HandOvers() {
		return fmt.Errorf("node: %s: max_subagents %d is fewer than the hand-overs its %s pattern may make in a task (%d): raise it, or leave it out",
			who, a.MaxSubAgents, a.Team.Pattern, a.Team.HandOvers())
	}
	return checkStops(who, a.MaxTokens, a.LoopRepeats, a.LoopStaleSteps)
}

// checkSubAgents checks the bound of an agent's sub-agents (who names it in the error).
func checkSubAgents(who string, n int) error {
	if n < 0 || n > MaxSubAgentsBound {
		return fmt.Errorf("node: %s: max_subagents must be between 0 (the default, %d) and %d; got %d", who, DefaultMaxSubAgents, MaxSubAgentsBound, n)
	}
	return nil
}

// checkCost checks the cost budget of an agent (who names it in the error).
func checkCost(who string, usd float64) error {
	if !validCost(usd) {
		return fmt.Errorf("node: %s: max_cost_usd must be between 0 and %g US dollars; got %g", who, float64(MaxCostBudget), usd)
	}
	return nil
}

// validCost reports whether usd is a cost budget: 0 (none) to MaxCostBudget.
func validCost(usd float64) bool { return usd >= 0 && usd <= MaxCostBudget }

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

// lessonsNamespace is the memory namespace of a reflexion agent's lessons.
func (a NamedAgent) lessonsNamespace() string {
	return cmp.Or(a.LessonsNamespace, "lessons:"+a.Name)
}

// withLessonNamespaces returns the memory tool's configuration allowed the
// namespaces of the reflexion agents' lessons too.
func (c Config) withLessonNamespaces() *memory.ToolConfig {
	tc := c.MemoryTool
	if tc == nil {
		return nil
	}
	out := *tc
	for _, a := range c.Agents {
		if ns := a.lessonsNamespace(); a.Paradigm == ParadigmReflexion && ns != out.Namespace && !slices.Contains(out.Namespaces, ns) {
			out.Namespaces = append(slices.Clone(out.Namespaces), ns)
		}
	}
	return &out
}

// paradigm returns the actors' paradigm of a named agent (nil for the loop alone),
// given the node's agent (def) it is built from.
func (c Config) paradigm(na NamedAgent, a actors.Agent) (actors.Paradigm, error) {
	switch na.Paradigm {
	case ParadigmReflection:
		p := actors.Reflection{MaxRounds: na.MaxRounds, CriticPrompt: na.CriticPrompt}
		if na.CriticModel != nil {
			p.CriticModels = []string{na.CriticModel.Name()}
		}
		return p, nil
	case ParadigmReflexion:
		tc := c.MemoryTool
		if tc == nil {
			return nil, fmt.Errorf("node: agent %q: the reflexion paradigm keeps its lessons with the memory tool, which this node does not have (Config.MemoryTool)", na.Name)
		}
		name := cmp.Or(tc.Name, "memory")
		tool := name
		if tc.Expand {
			tool = name + "_add"
		}
		if !slices.ContainsFunc(a.Tools, func(s messages.ToolSpec) bool { return s.Name == tool }) {
			return nil, fmt.Errorf("node: agent %q: the reflexion paradigm keeps its lessons with the memory tool: give the agent the tool %q", na.Name, tool)
		}
		return actors.Reflexion{Namespace: na.lessonsNamespace(), MemoryTool: name, Expanded: tc.Expand, Lessons: na.Lessons, Evaluate: na.Evaluate,
			EvaluatorPrompt: na.EvaluatorPrompt}, nil
	case ParadigmPlanExecute:
		return c.planExecute(na, a)
	}
	return nil, nil
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
		if a.Models = na.models(); a.Models != nil {
			a.Model = a.Models[0]
		}
		// The skills' section, as the default agent's, when it has their tools: all
		// of them, or those it names.
		a.SystemPrompt = cmp.Or(na.SystemPrompt, c.SystemPrompt)
		set, err := c.agentSkills(na)
		if err != nil {
			return nil, err
		}
		if section := set.PromptSection(); section != "" && (na.Tools == nil || len(na.Skills) > 0) {
			a.SystemPrompt += "\n\n" + strings.TrimSuffix(section, "\n")
		}
		if na.MaxSteps > 0 {
			a.MaxSteps = na.MaxSteps
		}
		if na.Paradigm == ParadigmReAct {
			a.Protocol = llm.ProtocolReAct
		}
		ownStops(na, &a)
		if a.Context, err = c.ownContext(na, a.Context); err != nil {
			return nil, err
		}
		a.Approvals, a.ApprovalTimeout = nil, 0
		for _, t := range na.Approvals {
			if a.Approvals == nil {
				a.Approvals = map[string]bool{}
			}
			a.Approvals[t] = true
		}
		switch {
		case na.ApprovalTimeout > 0:
			a.ApprovalTimeout = na.ApprovalTimeout
		case na.ApprovalTimeout == 0:
			a.ApprovalTimeout = c.ApprovalTimeout
		}
		if na.Paradigm == ParadigmSimple {
			// One call, no tools: nor the skills' section that tells of them.
			a.SingleCall, a.SystemPrompt = true, cmp.Or(na.SystemPrompt, c.SystemPrompt)
			a.Tools, a.Disclosure, a.Catalog, a.Chains = nil, nil, nil, nil
			a.Sources, a.Context.Evidence, a.Context.Recall, a.Context.Notes = actors.ContextSources{}, 0, 0, 0
			if err := a.CheckPromptFits(); err != nil {
				return nil, c.promptError(na.Name, err)
			}
			named[na.Name] = a
			continue
		}
		if na.Tools != nil {
			for _, name := range na.Tools {
				if _, ok := reg.Get(name); !ok {
					return nil, fmt.Errorf("node: agent %q: unknown tool %q: the node's tools are %v", na.Name, name, reg.Names())
				}
			}
			want := slices.Clone(na.Tools)
			if len(na.Skills) > 0 {
				for _, t := range set.Tools() {
					want = append(want, t.Spec().Name) // the skill tools, serving its skills
				}
			}
			// The registry's order (by name), so the tool section is stable.
			a.Tools = slices.DeleteFunc(slices.Clone(reg.Specs()), func(s messages.ToolSpec) bool { return !slices.Contains(want, s.Name) })
			a.Disclosure, a.Catalog, a.Chains = nil, nil, nil
			for name, ch := range def.Chains {
				if slices.Contains(na.Tools, name) {
					if a.Chains == nil {
						a.Chains = map[string]*tools.ChainTool{}
					}
					a.Chains[name] = ch
				}
			}
			if len(na.MCPServers) > 0 {
				if c.ToolCatalog == nil {
					return nil, fmt.Errorf("node: agent %q: MCP servers %v: the node has no MCP servers (ToolCatalog)", na.Name, na.MCPServers)
				}
				a.Catalog = serverCatalog{cat: c.ToolCatalog, servers: na.MCPServers}
			}
			if err := chainsRunnable(na.Name, a); err != nil {
				return nil, err
			}
		}
		// The tools that act for the agent (its memory namespace) show it their own
		// spec, in Tools and in what a disclosure offers.
		if own := agentSpecs(a.Tools, reg, na.Name); !sameSpecs(own, a.Tools) {
			a.Tools = own
			if a.Disclosure != nil {
				a.Disclosure = agentDisclosure{ToolDisclosure: a.Disclosure, own: own}
			}
		}
		if err := c.resolveGather(&a, na.Knowledge, na.MemoryNamespace, na.Context, false); err != nil {
			return nil, err
		}
		if a.Paradigm, err = c.paradigm(na, a); err != nil {
			return nil, err
		}
		// Its prompt and the tools it offers, as they are now final.
		if err := a.CheckPromptFits(); err != nil {
			return nil, c.promptError(na.Name, err)
		}
		named[na.Name] = a
	}
	return named, nil
}

// chainsRunnable fails when a step of one of the named agent a's chains calls a
// tool a does not have (among its Tools, or of its MCP servers): a session runs a
// chain's steps as the agent's own calls (actors' decideChain), so every call of
// such a chain would end at that step with "unknown tool".
func chainsRunnable(agent string, a actors.Agent) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(a.Chains)) {
		for _, s := range a.Chains[name].Steps() {
			has := slices.ContainsFunc(a.Tools, func(t messages.ToolSpec) bool { return t.Name == s.Tool })
			if sc, ok := a.Catalog.(serverCatalog); ok && sc.has(s.Tool) {
				has = true
			}
			if !has {
				errs = append(errs, fmt.Errorf("node: agent %q: chain %q: step %q calls the tool %q, which the agent does not have: add it to the agent's tools", agent, name, s.Name, s.Tool))
			}
		}
	}
	return errors.Join(errs...)
}

// ownStops sets the stop conditions of a, built for the named agent or team na
// from the default agent: na's own, each it leaves zero the default agent's (a
// team sets no loop detection: validate).
func ownStops(na NamedAgent, a *actors.Agent) {
	a.MaxTokens = cmp.Or(na.MaxTokens, a.MaxTokens)
	a.MaxCostUSD = cmp.Or(na.MaxCostUSD, a.MaxCostUSD)
	a.LoopRepeats = cmp.Or(na.LoopRepeats, a.LoopRepeats)
	a.LoopStaleSteps = cmp.Or(na.LoopStaleSteps, a.LoopStaleSteps)
}

// ownContext returns the context settings of the named agent or team na: its own
// (NamedAgent.Context, SummaryModel), each field it leaves zero the default agent's
// (def), checked as a whole.
func (c Config) ownContext(na NamedAgent, def actors.ContextOptions) (actors.ContextOptions, error) {
	// Gathering (Evidence, Recall, Notes) is resolved apart (resolveGather).
	out := actors.ContextOptions{Window: cmp.Or(na.Context.Window, def.Window),
		ReservedOutput: cmp.Or(na.Context.ReservedOutput, def.ReservedOutput),
		HistoryTurns:   cmp.Or(na.Context.HistoryTurns, def.HistoryTurns),
		Compression:    c.compression(na.Context.Compression, def.Compression)}
	if na.SummaryModel != nil {
		out.Compression.Model = na.SummaryModel.Name()
	}
	if err := out.Validate(); err != nil {
		what := "agent"
		if na.Team != nil {
			what = "team"
		}
		return out, fmt.Errorf("node: %s %q, with the default agent's context settings: %w", what, na.Name, err)
	}
	return out, nil
}

// promptError is the error of the agent name whose prompt leaves no room for a
// task (actors.Agent.CheckPromptFits): it names the teams the agent works in, and
// its part in each, since a team cannot work without it.
func (c Config) promptError(name string, err error) error {
	var parts []string
	for _, o := range c.Agents {
		if o.Team == nil {
			continue
		}
		tm := o.Team
		switch {
		case slices.ContainsFunc(tm.Members, func(m actors.TeamMember) bool { return m.Name == name }):
			parts = append(parts, fmt.Sprintf("a member of team %q", o.Name))
		case tm.Aggregator == name:
			parts = append(parts, fmt.Sprintf("the aggregator of team %q", o.Name))
		case tm.Judge == name:
			parts = append(parts, fmt.Sprintf("the judge of team %q", o.Name))
		case tm.Check.Critic == name:
			parts = append(parts, fmt.Sprintf("the critic of team %q", o.Name))
		}
	}
	if len(parts) == 0 {
		return fmt.Errorf("node: agent %q: %w", name, err)
	}
	return fmt.Errorf("node: agent %q, %s: %w", name, strings.Join(parts, ", "), err)
}

// agentSkills returns the skills the agent has: Config.Skills, or those it names.
func (c Config) agentSkills(na NamedAgent) (*skills.Set, error) {
	if len(na.Skills) == 0 {
		return c.Skills, nil
	}
	set, err := c.Skills.Only(na.Skills)
	if err != nil {
		return nil, fmt.Errorf("node: agent %q: %w", na.Name, err)
	}
	return set, nil
}

// skillTools returns the skill tools of the node's registry: those of Config.Skills,
// which serve an agent that names its skills (NamedAgent.Skills) those skills only.
func (c Config) skillTools() ([]tools.Tool, error) {
	def := c.Skills.Tools()
	byAgent := map[string][]tools.Tool{}
	for _, na := range c.Agents {
		if len(na.Skills) > 0 && na.Tools != nil {
			set, err := c.agentSkills(na)
			if err != nil {
				return nil, err
			}
			byAgent[na.Name] = set.Tools()
		}
	}
	return forAgents(def, byAgent), nil
}

// agentTool is a tool of the node's registry that acts for the agent a call is
// made for (tools.Call.Agent): an agent's own version of it (its memory namespace,
// its skills) when it has one, the default agent's otherwise.
type agentTool struct {
	tools.Tool
	byAgent map[string]tools.Tool
}

// forAgents returns def, each tool wrapped in an agentTool when an agent of
// byAgent has its own version of it (by name).
func forAgents(def []tools.Tool, byAgent map[string][]tools.Tool) []tools.Tool {
	if len(byAgent) == 0 {
		return def
	}
	out := make([]tools.Tool, len(def))
	for i, t := range def {
		at := &agentTool{Tool: t, byAgent: map[string]tools.Tool{}}
		name := t.Spec().Name
		for agent, ts := range byAgent {
			if j := slices.IndexFunc(ts, func(o tools.Tool) bool { return o.Spec().Name == name }); j >= 0 {
				at.byAgent[agent] = ts[j]
			}
		}
		out[i] = at
	}
	return out
}

// Call implements tools.Tool: the version of the agent the call is made for.
func (t *agentTool) Call(ctx context.Context, c tools.Call) (string, error) {
	return t.forAgent(c.Agent).Call(ctx, c)
}

func (t *agentTool) forAgent(agent string) tools.Tool {
	if own, ok := t.byAgent[agent]; ok {
		return own
	}
	return t.Tool
}

// Limits, SideEffects and Source are the default version's.
func (t *agentTool) Limits() tools.CallLimits { return tools.LimitsOf(t.Tool) }
func (t *agentTool) SideEffects() bool        { return tools.HasSideEffects(t.Tool) }
func (t *agentTool) Source() string           { return tools.SourceOf(t.Tool) }

// agentSpecs returns specs with the spec of each agentTool of reg replaced by the
// agent's version's (specs is not modified).
func agentSpecs(specs []messages.ToolSpec, reg *tools.Registry, agent string) []messages.ToolSpec {
	var out []messages.ToolSpec
	for i, s := range specs {
		t, _ := reg.Get(s.Name)
		at, ok := t.(*agentTool)
		if !ok {
			continue
		}
		own := at.forAgent(agent).Spec()
		var buf bytes.Buffer
		if json.Compact(&buf, own.Parameters) == nil {
			own.Parameters = buf.Bytes() // compacted, as the registry's specs are
		}
		if out == nil {
			out = slices.Clone(specs)
		}
		out[i] = own
	}
	if out == nil {
		return specs
	}
	return out
}

// sameSpecs reports whether a and b are one slice (agentSpecs returns its argument
// when no spec is the agent's own).
func sameSpecs(a, b []messages.ToolSpec) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// agentDisclosure is a disclosure that offers an agent its own version of the tools
// that act for it (agentTool): a spec named as one of own is replaced by it.
type agentDisclosure struct {
	actors.ToolDisclosure
	own []messages.ToolSpec
}

// Disclose implements actors.ToolDisclosure: a pure function of its arguments, as
// the wrapped disclosure's.
func (d agentDisclosure) Disclose(loads []actors.ToolLoad, catalog []tools.Tool) ([]messages.ToolSpec, string) {
	return d.withOwn(d.ToolDisclosure.Disclose(loads, catalog))
}

// DiscloseFolded implements actors.FoldedDisclosure: Disclose, from the folded
// loads.
func (d agentDisclosure) DiscloseFolded(loads *actors.ToolLoads, catalog []tools.Tool) ([]messages.ToolSpec, string) {
	return d.withOwn(actors.DiscloseLoads(d.ToolDisclosure, loads, catalog))
}

// withOwn returns specs with the agent's own version of the tools of own.
func (d agentDisclosure) withOwn(specs []messages.ToolSpec, section string) ([]messages.ToolSpec, string) {
	var out []messages.ToolSpec
	for i, s := range specs {
		j := slices.IndexFunc(d.own, func(o messages.ToolSpec) bool { return o.Name == s.Name })
		if j < 0 || bytes.Equal(d.own[j].Parameters, s.Parameters) && d.own[j].Description == s.Description {
			continue
		}
		if out == nil {
			out = slices.Clone(specs)
		}
		out[i] = d.own[j]
	}
	if out == nil {
		return specs, section
	}
	return out, section
}

// BoundedSection implements actors.BoundedDisclosure: the wrapped disclosure's
// bounded section, or its section when it has no bounded form.
func (d agentDisclosure) BoundedSection(catalog []tools.Tool) string {
	if b, ok := d.ToolDisclosure.(actors.BoundedDisclosure); ok {
		return b.BoundedSection(catalog)
	}
	_, section := d.ToolDisclosure.Disclose(nil, catalog)
	return section
}

// agentScopes returns what the disclosure strategy's tools (search_tools, load_tools,
// call_tool) see for each named agent with a list of tools (NamedAgent.Tools): the
// tools it lists (the chains among them), its skill tools (when it names its
// skills) and the tools of its MCP servers. A named agent's list bounds what it may
// call, through call_tool too: a call_tool of another tool of the node would run it
// unlisted, and a chain unlisted would run in that one call, its steps unchecked
// for the agent's approvals (actors' chainOf knows the chains of its list only).
// The default agent, and a named agent with no list, see every tool. An agent the
// node does not run sees none: a call of a session on another node, whose agents
// this node serving its tools was not given (the same agents file), would
// otherwise reach every tool of the node whatever the agent's list.
func (c Config) agentScopes() (disclosure.Scope, error) {
	byAgent := map[string]func(string) bool{}
	known := map[string]bool{}
	for _, na := range c.Agents {
		known[na.Name] = true
		if na.Team != nil || na.Tools == nil {
			continue
		}
		own := map[string]bool{}
		for _, name := range na.Tools {
			own[name] = true
		}
		if len(na.Skills) > 0 {
			set, err := c.agentSkills(na)
			if err != nil {
				return nil, err
			}
			for _, t := range set.Tools() {
				own[t.Spec().Name] = true
			}
		}
		servers := serverCatalog{servers: na.MCPServers}
		byAgent[na.Name] = func(name string) bool { return own[name] || servers.has(name) }
	}
	none := func(string) bool { return false }
	return func(agent string) func(string) bool {
		if has, ok := byAgent[agent]; ok {
			return has
		}
		if agent == "" || agent == "default" || known[agent] {
			return nil
		}
		return none
	}, nil
}

// serverCatalog is the part of a catalog of MCP tools that is of some servers:
// the tools named "<server>__<tool>" (mcp.Separator) of each.
type serverCatalog struct {
	cat     actors.ToolCatalog
	servers []string
}

var _ actors.ToolCatalog = serverCatalog{}

func (c serverCatalog) has(name string) bool {
	srv, _, ok := strings.Cut(name, "__")
	return ok && slices.Contains(c.servers, srv)
}

// Specs implements actors.ToolCatalog: the servers' tools now, sorted by name.
func (c serverCatalog) Specs() []messages.ToolSpec {
	all := c.cat.Specs()
	out := make([]messages.ToolSpec, 0, len(all))
	for _, s := range all {
		if c.has(s.Name) {
			out = append(out, s)
		}
	}
	return out
}

// Tool implements actors.ToolCatalog.
func (c serverCatalog) Tool(name string) (tools.Tool, bool) {
	if !c.has(name) {
		return nil, false
	}
	return c.cat.Tool(name)
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
	// Its own budgets, else the default agent's: they bound its task, its members'
	// work included (as the delegate tool hands each member what is left: the
	// node's agentBudgets). Its hand-overs wait for no approval.
	ownStops(na, &a)
	a.Approvals, a.ApprovalTimeout = nil, 0
	// Its own context settings (window, history, compression), else the default
	// agent's. A team gathers nothing: its members do, each for its own work.
	if a.Context, err = c.ownContext(na, def.Context); err != nil {
		return actors.Agent{}, err
	}
	a.Sources = actors.ContextSources{}
	// Its own model calls (an orchestrator's routing) send its system prompt and
	// no tools: that prompt must leave room for the task, as an agent's must. Its
	// members are agents of the node, checked as such (namedAgents).
	own := a
	own.Tools = nil
	if err := own.CheckPromptFits(); err != nil {
		return actors.Agent{}, fmt.Errorf("node: team %q: %w", na.Name, err)
	}
	return a, nil
}

// parallelTools is the bound of a session's tool calls in flight: MaxParallelTools
// (default 4), raised to the concurrency of a plan_execute agent that asks for more,
// so that its steps do run that many at once.
func (c Config) parallelTools() int {
	n := c.MaxParallelTools
	if n <= 0 {
		n = 4
	}
	for _, a := range c.Agents {
		n = max(n, a.PlanExecute.Concurrency)
	}
	return n
}

// planExecute returns the plan_execute paradigm of na, built as a: the agents its
// steps may name are the node's other agents, when a can delegate to them.
func (c Config) planExecute(na NamedAgent, a actors.Agent) (actors.PlanExecute, error) {
	pe := na.PlanExecute
	pe.Agents = nil
	if !slices.ContainsFunc(a.ToolSpecs(), func(s messages.ToolSpec) bool { return s.Name == actors.DelegateTool }) {
		if pe.Executor != "" {
			return pe, fmt.Errorf("node: agent %q: its executor %q is reached through the %s tool, which it does not have", na.Name, pe.Executor, actors.DelegateTool)
		}
		return pe, nil
	}
	pe.Agents = actors.PlanAgents(na.Name, c.roster())
	if _, ok := pe.Agents[pe.Executor]; pe.Executor != "" && !ok {
		return pe, fmt.Errorf("node: agent %q: its executor %q is not another agent of the node", na.Name, pe.Executor)
	}
	return pe, nil
}
