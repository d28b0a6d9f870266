package nodeconfig

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/provider"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/node"
)

// Paradigms an agents file may name today, and those it will (issue #13): a name of
// the second list is refused with "not supported yet", not as a typo.
var (
	paradigms       = node.Paradigms
	futureParadigms = []string{}
	agentFieldNames = []string{"description", "model", "fallbacks", "system_prompt", "paradigm", "tools", "memory", "max_steps",
		"settings", "max_rounds", "critic_prompt", "critic_model", "lessons_namespace", "lessons", "evaluate", "evaluator_prompt", "approval_timeout", "knowledge", "context"}
	agentFields    = slices.Concat(agentFieldNames, stopFieldNames)
	toolFieldNames = []string{"name", "approval"}
	approvalValues = []string{"required", "none"}
	// planSettingNames are the settings of a plan_execute agent.
	planSettingNames = []string{"concurrency", "max_plan_steps", "max_replans", "max_plan_retries", "max_depth", "max_total_steps", "executor"}
	agentName        = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)
	// paradigmFields are the fields of one paradigm only.
	paradigmFields = map[string]string{
		"settings":   node.ParadigmPlanExecute,
		"max_rounds": node.ParadigmReflection, "critic_prompt": node.ParadigmReflection, "critic_model": node.ParadigmReflection,
		"lessons_namespace": node.ParadigmReflexion, "lessons": node.ParadigmReflexion, "evaluate": node.ParadigmReflexion, "evaluator_prompt": node.ParadigmReflexion,
	}
)

// The prefixes of a tools entry that names a group of tools rather than one:
// "mcp:SERVER", every tool of the configured MCP server SERVER (as its tool list
// changes while the node runs), and "skill:NAME", the skill NAME (the skill tools,
// load_skill, read_skill_file and run_skill_script, for that skill).
const (
	ToolsOfMCP   = "mcp:"
	ToolsOfSkill = "skill:"
)

// DeclaredAgent is one agent of an agents file (AgentsFile): what it runs with. The
// empty values are the node's: its model (and fallbacks), its system prompt, function
// calling, all its tools (nil Tools), its max steps, its memory namespace.
type DeclaredAgent struct {
	// Name is the agent's key in the file: lower-case letters, digits, '_' and '-'.
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Model is the spec of the model its calls go to (offline, scripted:FILE or
	// PROVIDER[:MODEL]), Fallbacks those tried in order when it fails; resolved by
	// ResolveModels as the node's --fallback are.
	Model        string   `json:"model,omitempty"`
	Fallbacks    []string `json:"fallbacks,omitempty"`
	SystemPrompt string   `json:"system_prompt,omitempty"`
	Paradigm     string   `json:"paradigm"`
	// Tools are the entries of its "tools": tool names, "mcp:SERVER" and
	// "skill:NAME" (ToolsOfMCP, ToolsOfSkill).
	Tools    []string `json:"tools"`
	MaxSteps int      `json:"max_steps,omitempty"`
	// Memory is the namespace of its memory tool and core blocks, in place of the
	// node's (the configuration's memory.namespace).
	Memory string `json:"memory_namespace,omitempty"`
	// Knowledge is the default knowledge base of its rag tool, in place of the
	// node's (the configuration's knowledge.default).
	Knowledge string `json:"knowledge,omitempty"`
	// Approvals are the tools among Tools declared {name: …, approval: required}:
	// their calls wait for a human's approval.
	Approvals []string `json:"approvals,omitempty"`
	// ApprovalTimeout is approval_timeout, a duration: "" for the node's, "0" to
	// wait for ever.
	ApprovalTimeout string `json:"approval_timeout,omitempty"`
	// Stop conditions (stops.go): MaxTokens 0 is no budget; a nil loop setting is the
	// node's default, 0 turns that check off.
	MaxTokens      int     `json:"max_tokens,omitempty"`
	LoopRepeats    *int    `json:"loop_repeats,omitempty"`
	LoopStaleSteps *int    `json:"loop_stale_steps,omitempty"`
	MaxCostUSD     float64 `json:"max_cost_usd,omitempty"`
	// MaxSubAgents is max_subagents (node.NamedAgent.MaxSubAgents; 0: the node's).
	MaxSubAgents int `json:"max_subagents,omitempty"`
	// Context is its context section (context.go); a zero field is the node's.
	Context ContextFile `json:"context,omitzero"`
	// MaxRounds, CriticPrompt and CriticModel (a model spec, resolved by
	// ResolveModels as Model is) are a reflection's settings (node.NamedAgent).
	MaxRounds    int    `json:"max_rounds,omitempty"`
	CriticPrompt string `json:"critic_prompt,omitempty"`
	CriticModel  string `json:"critic_model,omitempty"`
	// LessonsNamespace, Lessons and Evaluate are a reflexion's; Evaluate is true
	// unless the file says "evaluate: false".
	LessonsNamespace string `json:"lessons_namespace,omitempty"`
	Lessons          int    `json:"lessons,omitempty"`
	Evaluate         bool   `json:"evaluate,omitempty"`
	EvaluatorPrompt  string `json:"evaluator_prompt,omitempty"`
	// PlanSettings are a plan_execute agent's settings (nil: the defaults).
	PlanSettings *PlanSettings `json:"settings,omitempty"`
	// Line is where the agent's name is in the file; the others where each field
	// (or list entry) is.
	Line          int `json:"-"`
	toolsLine     int
	paradigmLine  int
	criticLine    int
	critic        llm.Model
	toolLines     []int
	modelLine     int
	fallbackLines []int
	memoryLine    int
	knowledgeLine int
	// gatherLine is the line of its context section's latest gathering number;
	// contextLine the line of the section.
	gatherLine  int
	contextLine int
	// model and fallbacks are the resolved models (ResolveModels).
	model     llm.Model
	fallbacks []llm.Model
}

// PlanSettings are the settings of a plan_execute agent (the "settings" of an
// agent of that paradigm); a zero value is the default (actors.PlanExecute).
type PlanSettings struct {
	Concurrency    int    `json:"concurrency,omitempty"`
	MaxPlanSteps   int    `json:"max_plan_steps,omitempty"`
	MaxReplans     int    `json:"max_replans,omitempty"`
	MaxPlanRetries int    `json:"max_plan_retries,omitempty"`
	MaxDepth       int    `json:"max_depth,omitempty"`
	MaxTotalSteps  int    `json:"max_total_steps,omitempty"`
	Executor       string `json:"executor,omitempty"`
}

// AgentsFile is an agents file (YAML): its path and its agents, sorted by name.
//
//	agents:
//	  researcher:
//	    description: Finds and checks facts.
//	    system_prompt: You research.
//	    paradigm: react                 # function_calling (default), react, simple, reflection or reflexion
//	    model: openai:gpt-4o-mini       # as --model: offline, scripted:FILE, PROVIDER[:MODEL]
//	    fallbacks: [deepseek, offline]  # as --fallback, tried in order when model fails
//	    tools: [calculator, clock, "mcp:github", "skill:pdf"] # absent: all the node's
//	    memory: agent:researcher        # its memory tool's and core blocks' namespace
//	    knowledge: papers               # its rag tool's default knowledge base
//	    max_steps: 8
//	    max_tokens: 20000               # stop conditions (stops.go)
//	    context: {window: 32000, reserved_output: 2000, history_turns: 40} # context.go
//	  reviewer:
//	    paradigm: reflection
//	    max_rounds: 3                   # critiques at most (default 2)
//	    critic_prompt: Check every figure.
//	    critic_model: openai:gpt-4o      # the critic's own model (default: the agent's)
//	  learner:
//	    paradigm: reflexion             # needs the node's memory tool
//	    lessons_namespace: lessons:learner  # the default
//	    lessons: 3                      # lessons in a prompt at most (default 3)
//	    evaluate: true                  # judge each answer (default true)
//	    evaluator_prompt: Pass only answers that cite a source.
//	  mailer:
//	    tools:
//	      - clock
//	      - {name: send_email, approval: required}   # each call waits for a human
//	    approval_timeout: 10m           # then it is rejected; 0 waits for ever
//	                                    # (absent: the node's --approval-timeout)
//	  planner:
//	    paradigm: plan_execute
//	    settings:                       # plan_execute's; each has a default
//	      concurrency: 4                # steps running at once
//	      max_plan_steps: 20            # steps in a plan
//	      max_replans: 2                # re-plans after a failed step
//	      executor: researcher          # who works a step with only a goal (delegate tool)
//
// A "teams" section declares teams of the file's agents (DeclaredTeam); a task
// names a team as it names an agent.
type AgentsFile struct {
	Path   string
	Agents []DeclaredAgent
	// Teams are the file's teams, sorted by name.
	Teams []DeclaredTeam
}

// Lookup returns the agent called name.
func (f AgentsFile) Lookup(name string) (DeclaredAgent, bool) {
	i := slices.IndexFunc(f.Agents, func(a DeclaredAgent) bool { return a.Name == name })
	if i < 0 {
		return DeclaredAgent{}, false
	}
	return f.Agents[i], true
}

// Known says which agents a task may name: "default", the file's agents and its teams.
func (f AgentsFile) Known() string {
	names := append([]string{"default"}, f.agentNames()...)
	s := "the agents are " + strings.Join(names, ", ")
	if len(f.Teams) > 0 {
		teams := make([]string, len(f.Teams))
		for i, t := range f.Teams {
			teams[i] = t.Name
		}
		s += "; the teams are " + strings.Join(teams, ", ")
	}
	return s
}

// AgentsFileError is a problem of an agents file at a line (0: the file as a whole).
type AgentsFileError struct {
	Path string
	Line int
	Msg  string
}

func (e *AgentsFileError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("agents file %s: line %d: %s", e.Path, e.Line, e.Msg)
	}
	return fmt.Sprintf("agents file %s: %s", e.Path, e.Msg)
}

// LoadAgents reads and checks the agents file at path: strict YAML (no unknown field,
// no duplicate key), valid names, paradigms and limits. The tools are checked against
// the node's by CheckTools, once they are known.
func LoadAgents(path string) (AgentsFile, error) {
	b, err := readFile(path)
	if err != nil {
		return AgentsFile{}, fmt.Errorf("agents file: %w", err)
	}
	return ParseAgents(path, b)
}

// emptyDocument reports whether n is a YAML document with nothing in it: a "---"
// followed by nothing but white space or comments (an explicit null is something).
func emptyDocument(n *yaml.Node) bool {
	return n.Kind == yaml.DocumentNode && len(n.Content) == 1 && n.Content[0].Kind == yaml.ScalarNode &&
		n.Content[0].Tag == "!!null" && n.Content[0].Value == ""
}

// ParseAgents is LoadAgents of a file's content; path names it in errors.
func ParseAgents(path string, b []byte) (AgentsFile, error) {
	f := AgentsFile{Path: path}
	fail := func(line int, format string, args ...any) (AgentsFile, error) {
		return AgentsFile{}, &AgentsFileError{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return fail(0, "empty: want an \"agents:\" mapping of names to agents")
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		return fail(yamlErrorLine(err), "not valid YAML: %s", yamlErrorText(err))
	}
	// A second document, valid or not, is refused: one that does not parse was
	// read past, its agents with it. An empty one (a "---" that ends the file,
	// as some editors and generators write, with at most comments after it)
	// holds nothing to read past.
	for {
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(yamlErrorLine(err), "a second YAML document, not valid YAML (%s): want one", yamlErrorText(err))
		}
		if !emptyDocument(&extra) {
			return fail(extra.Line, "a second YAML document: want one")
		}
	}
	if n := firstAlias(&doc); n != nil {
		return fail(n.Line, "alias *%s: an agents file has no anchors nor aliases (nor merge keys <<): write the value out", n.Value)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return fail(root.Line, "want a mapping with the key \"agents\"")
	}
	var agents, teams *yaml.Node
	for i := 0; i < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch {
		case k.Value == "agents" && agents == nil:
			agents = v
		case k.Value == "teams" && teams == nil:
			teams = v
		case k.Value == "agents" || k.Value == "teams":
			return fail(k.Line, "%s is given twice", k.Value)
		default:
			return fail(k.Line, "unknown field %q: the fields are agents, teams", k.Value)
		}
	}
	if agents == nil || agents.Kind != yaml.MappingNode || len(agents.Content) == 0 {
		line := root.Line
		if agents != nil {
			line = agents.Line
		}
		return fail(line, "agents: want a mapping of names to agents, with at least one")
	}
	declared := make(map[string]bool, len(agents.Content)/2)
	for i := 0; i < len(agents.Content); i += 2 {
		k, v := agents.Content[i], agents.Content[i+1]
		a, err := parseAgent(path, k, v)
		if err != nil {
			return AgentsFile{}, err
		}
		if declared[a.Name] {
			return fail(k.Line, "agent %q is declared twice", a.Name)
		}
		declared[a.Name] = true
		f.Agents = append(f.Agents, a)
	}
	slices.SortFunc(f.Agents, func(a, b DeclaredAgent) int { return strings.Compare(a.Name, b.Name) })
	if teams != nil {
		if teams.Kind != yaml.MappingNode || len(teams.Content) == 0 {
			return fail(teams.Line, "teams: want a mapping of names to teams, with at least one")
		}
		for i := 0; i < len(teams.Content); i += 2 {
			k, v := teams.Content[i], teams.Content[i+1]
			t, err := parseTeam(path, k, v)
			if err != nil {
				return AgentsFile{}, err
			}
			if _, dup := f.LookupTeam(t.Name); dup {
				return fail(k.Line, "team %q is declared twice", t.Name)
			}
			f.Teams = append(f.Teams, t)
		}
		slices.SortFunc(f.Teams, func(a, b DeclaredTeam) int { return strings.Compare(a.Name, b.Name) })
		if err := f.checkTeams(); err != nil {
			return AgentsFile{}, err
		}
	}
	return f, nil
}

func parseAgent(path string, k, v *yaml.Node) (DeclaredAgent, error) {
	fail := func(line int, format string, args ...any) (DeclaredAgent, error) {
		return DeclaredAgent{}, &AgentsFileError{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	name := k.Value
	if k.Kind != yaml.ScalarNode || !agentName.MatchString(name) {
		return fail(k.Line, "agent name %q: want %s", name, node.AgentNameRule)
	}
	if name == "default" {
		return fail(k.Line, "agent name \"default\" is the node's own agent (its configuration's system_prompt, max_steps and tools): choose another name")
	}
	if v.Kind != yaml.MappingNode {
		return fail(v.Line, "agent %q: want a mapping of its fields (%s)", name, strings.Join(agentFields, ", "))
	}
	a := DeclaredAgent{Name: name, Line: k.Line, Paradigm: node.ParadigmFunctionCalling}
	str := func(n *yaml.Node, field string) (string, error) {
		if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
			return "", &AgentsFileError{Path: path, Line: n.Line, Msg: fmt.Sprintf("agent %q: %s: want a string", name, field)}
		}
		return n.Value, nil
	}
	seen := map[string]int{}
	var settings *yaml.Node
	for i := 0; i < len(v.Content); i += 2 {
		fk, fv := v.Content[i], v.Content[i+1]
		if seen[fk.Value] > 0 {
			return fail(fk.Line, "agent %q: field %q is given twice", name, fk.Value)
		}
		seen[fk.Value] = fk.Line
		var err error
		intIn := func(out *int, lo, hi int) error {
			if fv.Kind != yaml.ScalarNode || fv.Tag != "!!int" || fv.Decode(out) != nil || *out < lo || *out > hi {
				return &AgentsFileError{Path: path, Line: fv.Line, Msg: fmt.Sprintf("agent %q: %s %q: want an integer from %d to %d", name, fk.Value, fv.Value, lo, hi)}
			}
			return nil
		}
		switch fk.Value {
		case "description":
			a.Description, err = str(fv, fk.Value)
		case "system_prompt":
			a.SystemPrompt, err = str(fv, fk.Value)
		case "model":
			if a.Model, err = str(fv, fk.Value); err != nil {
				break
			}
			if msg := checkAgentModel(a.Model); msg != "" {
				return fail(fv.Line, "agent %q: model %s", name, msg)
			}
			a.modelLine = fv.Line
		case "fallbacks":
			if fv.Kind != yaml.SequenceNode || len(fv.Content) == 0 {
				return fail(fv.Line, "agent %q: fallbacks: want a list of model specs, with at least one", name)
			}
			for _, m := range fv.Content {
				s, err := str(m, "fallbacks")
				if err != nil {
					return DeclaredAgent{}, err
				}
				if msg := checkAgentModel(s); msg != "" {
					return fail(m.Line, "agent %q: fallback %s", name, msg)
				}
				if slices.Contains(a.Fallbacks, s) {
					return fail(m.Line, "agent %q: fallback %q is listed twice", name, s)
				}
				a.Fallbacks, a.fallbackLines = append(a.Fallbacks, s), append(a.fallbackLines, m.Line)
			}
		case "memory":
			if fv.Kind == yaml.MappingNode {
				return fail(fv.Line, "agent %q: memory: want a namespace, such as memory: agent:%s (the node's memory section says the rest)", name, name)
			}
			if a.Memory, err = str(fv, fk.Value); err != nil {
				break
			}
			if err := memory.CheckNamespace(a.Memory); err != nil {
				return fail(fv.Line, "agent %q: memory: %v", name, err)
			}
			a.memoryLine = fv.Line
		case "knowledge":
			if a.Knowledge, err = str(fv, fk.Value); err != nil {
				break
			}
			if err := knowledge.CheckName(a.Knowledge); err != nil {
				return fail(fv.Line, "agent %q: knowledge: %v", name, err)
			}
			a.knowledgeLine = fv.Line
		case "max_rounds":
			err = intIn(&a.MaxRounds, 1, node.MaxReflectionRounds)
		case "critic_prompt":
			a.CriticPrompt, err = str(fv, fk.Value)
		case "evaluator_prompt":
			a.EvaluatorPrompt, err = str(fv, fk.Value)
		case "lessons_namespace":
			if a.LessonsNamespace, err = str(fv, fk.Value); err == nil {
				if nerr := memory.CheckNamespace(a.LessonsNamespace); nerr != nil {
					return fail(fv.Line, "agent %q: lessons_namespace: %v", name, nerr)
				}
			}
		case "lessons":
			err = intIn(&a.Lessons, 1, 20)
		case "evaluate":
			if fv.Kind != yaml.ScalarNode || fv.Tag != "!!bool" || fv.Decode(&a.Evaluate) != nil {
				return fail(fv.Line, "agent %q: evaluate %q: want true or false", name, fv.Value)
			}
		case "critic_model":
			if a.CriticModel, err = str(fv, fk.Value); err != nil {
				break
			}
			if msg := checkAgentModel(a.CriticModel); msg != "" {
				return fail(fv.Line, "agent %q: critic_model %s", name, msg)
			}
			a.criticLine = fv.Line
		case "paradigm":
			if a.Paradigm, err = str(fv, fk.Value); err != nil {
				break
			}
			a.paradigmLine = fv.Line
			switch {
			case slices.Contains(paradigms, a.Paradigm):
			case slices.Contains(futureParadigms, a.Paradigm):
				return fail(fv.Line, "agent %q: paradigm %q is not supported yet: use %s", name, a.Paradigm, orList(paradigms))
			default:
				return fail(fv.Line, "agent %q: unknown paradigm %q: want %s", name, a.Paradigm, orList(paradigms))
			}
		case "settings":
			settings = fv // read once the paradigm is known: a wrong one is the mistake to name
		case "max_steps":
			if fv.Kind != yaml.ScalarNode || fv.Tag != "!!int" || fv.Decode(&a.MaxSteps) != nil || a.MaxSteps < 1 || a.MaxSteps > maxMaxSteps {
				return fail(fv.Line, "agent %q: max_steps %q: want an integer from 1 to %d", name, fv.Value, maxMaxSteps)
			}
		case "approval_timeout":
			d, err := time.ParseDuration(fv.Value)
			if fv.Kind != yaml.ScalarNode || fv.Tag == "!!null" || err != nil || d < 0 || d > maxApprovalTimeout {
				return fail(fv.Line, "agent %q: approval_timeout %q: want a duration from 0 (wait for ever) to %s, e.g. 10m", name, fv.Value, shortDuration(maxApprovalTimeout))
			}
			a.ApprovalTimeout = fv.Value
		case "tools":
			if fv.Kind != yaml.SequenceNode {
				return fail(fv.Line, "agent %q: tools: want a list of tool names", name)
			}
			a.Tools, a.toolsLine = []string{}, fv.Line
			for _, t := range fv.Content {
				var s string
				var err error
				if t.Kind == yaml.MappingNode {
					var approval bool
					s, approval, err = parseToolEntry(path, name, t)
					if approval && (strings.HasPrefix(s, ToolsOfMCP) || strings.HasPrefix(s, ToolsOfSkill)) {
						return fail(t.Line, "agent %q: tools: %q: approval is given to a tool, not to a group of tools: list the tool by its name", name, s)
					}
					if approval {
						a.Approvals = append(a.Approvals, s)
					}
				} else {
					s, err = str(t, "tools")
				}
				if err != nil {
					return DeclaredAgent{}, err
				}
				if slices.Contains(a.Tools, s) {
					return fail(t.Line, "agent %q: tool %q is listed twice", name, s)
				}
				if msg := checkToolGroup(s); msg != "" {
					return fail(t.Line, "agent %q: tool %q: %s", name, s, msg)
				}
				a.Tools, a.toolLines = append(a.Tools, s), append(a.toolLines, t.Line)
			}
		case "max_tokens", "loop_repeats", "loop_stale_steps", "max_cost_usd", "max_subagents": // stopFieldNames
			err = parseStopField(path, fmt.Sprintf("agent %q", name), &a, fk, fv)
		case "context":
			a.contextLine = fk.Line
			a.Context, a.gatherLine, err = parseContext(path, fmt.Sprintf("agent %q", name), fv)
		default:
			return fail(fk.Line, "agent %q: unknown field %q: the fields are %s", name, fk.Value, strings.Join(agentFields, ", "))
		}
		if err != nil {
			return DeclaredAgent{}, err
		}
	}
	if a.Fallbacks != nil && a.Model == "" {
		return fail(k.Line, "agent %q: fallbacks without model: name the model they stand in for", name)
	}
	if a.Paradigm == node.ParadigmSimple {
		// One model call offered no tools: a tools list would promise what it never gets.
		if a.Tools != nil {
			return fail(toolsLine(v), "agent %q: paradigm %q offers no tools: remove \"tools\" (or choose %s)", name, a.Paradigm, node.ParadigmFunctionCalling)
		}
		a.Tools = []string{}
	}
	// A paradigm's settings on an agent of another paradigm are a mistake, not a no-op.
	for _, field := range slices.Sorted(maps.Keys(paradigmFields)) {
		if line := seen[field]; line > 0 && paradigmFields[field] != a.Paradigm {
			return fail(line, "agent %q: %s is a setting of the %s paradigm, and this agent's is %s", name, field, paradigmFields[field], a.Paradigm)
		}
	}
	if settings != nil {
		var err error
		if a.PlanSettings, err = parsePlanSettings(path, name, settings); err != nil {
			return DeclaredAgent{}, err
		}
	}
	if a.Paradigm == node.ParadigmReflexion && seen["evaluate"] == 0 {
		a.Evaluate = true
	}
	return a, nil
}

// checkAgentModel says what is wrong with an agent's model spec ("" when nothing):
// one that provider.FromSpec understands, but auto: an agent names its model.
func checkAgentModel(spec string) string {
	if spec == "auto" || spec == "" {
		return fmt.Sprintf("%q: name a model (offline, scripted:FILE or PROVIDER[:MODEL]), or leave model out for the node's", spec)
	}
	if err := provider.CheckSpec(spec); err != nil {
		return err.Error()
	}
	return ""
}

// checkToolGroup says what is wrong with a tools entry of the form mcp:SERVER or
// skill:NAME ("" when nothing, or when it is a tool's name).
func checkToolGroup(entry string) string {
	for _, prefix := range []string{ToolsOfMCP, ToolsOfSkill} {
		if rest, ok := strings.CutPrefix(entry, prefix); ok && (strings.TrimSpace(rest) == "" || rest != strings.TrimSpace(rest)) {
			return fmt.Sprintf("want %sNAME, with the name of a configured %s", prefix, map[string]string{ToolsOfMCP: "MCP server", ToolsOfSkill: "skill"}[prefix])
		}
	}
	return ""
}

// toolsLine is the line of the "tools" key of an agent's mapping.
func toolsLine(agent *yaml.Node) int {
	for i := 0; i < len(agent.Content); i += 2 {
		if agent.Content[i].Value == "tools" {
			return agent.Content[i].Line
		}
	}
	return agent.Line
}

// maxApprovalTimeout bounds an agent's approval_timeout (and the node's).
const maxApprovalTimeout = 30 * 24 * time.Hour

// parseToolEntry reads a tool given as a mapping, {name: send_email, approval:
// required}: its name, and whether its calls wait for approval.
func parseToolEntry(path, agent string, t *yaml.Node) (name string, approval bool, err error) {
	fail := func(line int, format string, args ...any) (string, bool, error) {
		return "", false, &AgentsFileError{Path: path, Line: line, Msg: fmt.Sprintf("agent %q: tools: ", agent) + fmt.Sprintf(format, args...)}
	}
	seen := map[string]bool{}
	for i := 0; i < len(t.Content); i += 2 {
		k, v := t.Content[i], t.Content[i+1]
		if seen[k.Value] {
			return fail(k.Line, "field %q is given twice", k.Value)
		}
		seen[k.Value] = true
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" || v.Value == "" {
			return fail(v.Line, "%s: want a string", k.Value)
		}
		switch k.Value {
		case "name":
			name = v.Value
		case "approval":
			if !slices.Contains(approvalValues, v.Value) {
				return fail(v.Line, "approval %q: want %s", v.Value, strings.Join(approvalValues, " or "))
			}
			approval = v.Value == "required"
		default:
			return fail(k.Line, "unknown field %q of a tool: the fields are %s", k.Value, strings.Join(toolFieldNames, ", "))
		}
	}
	if name == "" {
		return fail(t.Line, "a tool given as a mapping needs its name: {name: send_email, approval: required}")
	}
	return name, approval, nil
}

// orList joins names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// parsePlanSettings reads a plan_execute agent's settings.
func parsePlanSettings(path, name string, v *yaml.Node) (*PlanSettings, error) {
	fail := func(line int, format string, args ...any) (*PlanSettings, error) {
		return nil, &AgentsFileError{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	if v.Kind != yaml.MappingNode {
		return fail(v.Line, "agent %q: settings: want a mapping (%s)", name, strings.Join(planSettingNames, ", "))
	}
	ps := &PlanSettings{}
	bounds := map[string]struct {
		to       *int
		min, max int
	}{
		"concurrency": {&ps.Concurrency, 1, 64}, "max_plan_steps": {&ps.MaxPlanSteps, 1, 100}, "max_replans": {&ps.MaxReplans, 1, 20},
		"max_plan_retries": {&ps.MaxPlanRetries, 1, 10}, "max_depth": {&ps.MaxDepth, 1, 5}, "max_total_steps": {&ps.MaxTotalSteps, 1, 500},
	}
	seen := map[string]bool{}
	for i := 0; i < len(v.Content); i += 2 {
		k, fv := v.Content[i], v.Content[i+1]
		if seen[k.Value] {
			return fail(k.Line, "agent %q: setting %q is given twice", name, k.Value)
		}
		seen[k.Value] = true
		if b, ok := bounds[k.Value]; ok {
			if fv.Kind != yaml.ScalarNode || fv.Tag != "!!int" || fv.Decode(b.to) != nil || *b.to < b.min || *b.to > b.max {
				return fail(fv.Line, "agent %q: %s %q: want an integer from %d to %d", name, k.Value, fv.Value, b.min, b.max)
			}
			continue
		}
		if k.Value != "executor" {
			return fail(k.Line, "agent %q: unknown setting %q: the plan_execute settings are %s", name, k.Value, strings.Join(planSettingNames, ", "))
		}
		if fv.Kind != yaml.ScalarNode || fv.Tag == "!!null" || (!agentName.MatchString(fv.Value) && fv.Value != "default") {
			return fail(fv.Line, "agent %q: executor: want an agent's name", name)
		}
		if fv.Value == name {
			return fail(fv.Line, "agent %q: executor: an agent cannot be its own executor", name)
		}
		ps.Executor = fv.Value
	}
	return ps, nil
}

// CheckTools reports the first tool of an agent that is not among known (the node's
// tools), with its line. Entries mcp:SERVER and skill:NAME are CheckNodeTools'.
func (f AgentsFile) CheckTools(known []string) error {
	for _, a := range f.Agents {
		for i, t := range a.Tools {
			if isToolGroup(t) {
				continue
			}
			if !slices.Contains(known, t) {
				sorted := slices.Sorted(slices.Values(known))
				return &AgentsFileError{Path: f.Path, Line: a.toolLines[i],
					Msg: fmt.Sprintf("agent %q: unknown tool %q: the node's tools are %s", a.Name, t, strings.Join(sorted, ", "))}
			}
		}
	}
	return nil
}

func isToolGroup(entry string) bool {
	return strings.HasPrefix(entry, ToolsOfMCP) || strings.HasPrefix(entry, ToolsOfSkill)
}

// checkGroups reports the first mcp:SERVER entry whose server is not among servers,
// or skill:NAME whose skill is not among skillNames, with its line.
func (f AgentsFile) checkGroups(servers, skillNames []string) error {
	for _, a := range f.Agents {
		for i, t := range a.Tools {
			kind, names, name := "", []string(nil), ""
			if s, ok := strings.CutPrefix(t, ToolsOfMCP); ok {
				kind, names, name = "MCP server", servers, s
			} else if s, ok := strings.CutPrefix(t, ToolsOfSkill); ok {
				kind, names, name = "skill", skillNames, s
			} else {
				continue
			}
			if slices.Contains(names, name) {
				continue
			}
			have := "there are none"
			if len(names) > 0 {
				have = "they are " + strings.Join(names, ", ")
			}
			where := map[string]string{"MCP server": "the configuration's mcp_servers", "skill": "the skills directory (--skills)"}[kind]
			return &AgentsFileError{Path: f.Path, Line: a.toolLines[i],
				Msg: fmt.Sprintf("agent %q: unknown %s %q in %q: %s has the node's, and %s", a.Name, kind, name, t, where, have)}
		}
	}
	return nil
}

// ResolveModels resolves the models of the file's agents, before anything starts,
// and keeps them for NodeAgents. A spec the node already runs (known, by spec: its
// --model and each --fallback) is that model. Any other is resolved once, as
// provider.FallbackFromSpec resolves a --fallback: a provider's model runs at that
// provider's own base URL with that provider's own key variable, nothing else (the
// node's LLM_BASE_URL, LLM_API_KEY and "llm" section configure its own model only),
// so no key goes to a host it was not made for. A model that cannot be reached that
// way (a provider without its key, a script that does not load) is an error at its
// line, as is a model whose name another model of the node has (a call names its
// model by name) unless both are the same provider's. It returns the API keys the
// models use, for the node's redactor. env is os.Getenv when nil; its LLM_TIMEOUT
// is each model's per-request timeout: pass the node's provider.Config.TimeoutEnv so
// that they end each request when the node's own model does (the timeout is the one
// setting of the node's that they share).
func (f *AgentsFile) ResolveModels(ctx context.Context, known map[string]llm.Model, env func(string) string) ([]string, error) {
	type named struct {
		spec string
		m    llm.Model
	}
	bySpec := map[string]llm.Model{}
	byName := map[string]named{}
	for _, spec := range slices.Sorted(maps.Keys(known)) {
		m := known[spec]
		bySpec[spec] = m
		if _, ok := byName[m.Name()]; !ok {
			byName[m.Name()] = named{spec, m}
		}
	}
	var secrets []string
	// resolve resolves the model spec at line of who (`agent "NAME"` or `team "NAME"`).
	resolve := func(who, spec string, line int) (llm.Model, error) {
		if m, ok := bySpec[spec]; ok {
			return m, nil
		}
		m, _, key, err := provider.FallbackFromSpec(ctx, spec, env)
		if err != nil {
			return nil, &AgentsFileError{Path: f.Path, Line: line, Msg: fmt.Sprintf("%s: model %q cannot be reached: %v (an agent's model is resolved as a --fallback: at its provider's own base URL, with its provider's own key variable only)", who, spec, err)}
		}
		if key != "" {
			secrets = append(secrets, key)
		}
		if other, ok := byName[m.Name()]; ok {
			if p := providerOf(m); p == "" || p != providerOf(other.m) {
				return nil, &AgentsFileError{Path: f.Path, Line: line, Msg: fmt.Sprintf(
					"%s: model %q is named %q, as model %q is: a call names its model by name, so two models of one name must be one provider's; give one of them another name",
					who, spec, m.Name(), other.spec)}
			}
			m = other.m // the same provider's model of that name
		} else {
			byName[m.Name()] = named{spec, m}
		}
		bySpec[spec] = m
		return m, nil
	}
	for i := range f.Agents {
		a := &f.Agents[i]
		a.model, a.fallbacks, a.critic, a.Context.summary = nil, nil, nil, nil
		if s := a.Context.SummaryModel; s != "" && s != actors.NoSummaryModel {
			m, err := resolve(fmt.Sprintf("agent %q", a.Name), s, a.Context.summaryLine)
			if err != nil {
				return nil, err
			}
			a.Context.summary = m
		}
		if a.CriticModel != "" {
			c, err := resolve(fmt.Sprintf("agent %q", a.Name), a.CriticModel, a.criticLine)
			if err != nil {
				return nil, err
			}
			a.critic = c
		}
		if a.Model == "" {
			continue
		}
		m, err := resolve(fmt.Sprintf("agent %q", a.Name), a.Model, a.modelLine)
		if err != nil {
			return nil, err
		}
		a.model = m
		for j, spec := range a.Fallbacks {
			fm, err := resolve(fmt.Sprintf("agent %q", a.Name), spec, a.fallbackLines[j])
			if err != nil {
				return nil, err
			}
			if fm.Name() == m.Name() || slices.ContainsFunc(a.fallbacks, func(o llm.Model) bool { return o.Name() == fm.Name() }) {
				return nil, &AgentsFileError{Path: f.Path, Line: a.fallbackLines[j],
					Msg: fmt.Sprintf("agent %q: fallback %q is model %q, already in the agent's chain", a.Name, spec, fm.Name())}
			}
			a.fallbacks = append(a.fallbacks, fm)
		}
	}
	for i := range f.Teams {
		t := &f.Teams[i]
		t.Context.summary = nil
		if s := t.Context.SummaryModel; s != "" && s != actors.NoSummaryModel {
			m, err := resolve(fmt.Sprintf("team %q", t.Name), s, t.Context.summaryLine)
			if err != nil {
				return nil, err
			}
			t.Context.summary = m
		}
	}
	return secrets, nil
}

// providerOf is a model's provider (gateway.ProviderNamer), or "" when it says none.
func providerOf(m llm.Model) string {
	if p, ok := m.(interface{ Provider() string }); ok {
		return p.Provider()
	}
	return ""
}

// firstAlias returns the first alias node (*name) under n, or nil. The file's
// parser reads scalars and mappings only, so an alias (whose value is another
// node's) was misread as a value of the wrong kind ("want a string"), and a merge
// key (<<: *name) as an unknown field.
func firstAlias(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode {
		return n
	}
	for _, c := range n.Content {
		if a := firstAlias(c); a != nil {
			return a
		}
	}
	return nil
}

var yamlLine = regexp.MustCompile(`line (\d+)`)

// yamlErrorLine finds the line in a YAML parser's error (0: none).
func yamlErrorLine(err error) int {
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return 0
	}
	n := 0
	fmt.Sscan(m[1], &n)
	return n
}

// yamlErrorText is the parser's error without its "yaml: line N:" prefix.
func yamlErrorText(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	if i := strings.Index(s, ": "); i >= 0 && strings.HasPrefix(s, "line ") {
		s = s[i+2:]
	}
	return s
}

// NodeAgents returns the file's agents, then its teams, as a node runs them
// (node.Config.Agents), with the models ResolveModels resolved (none before it is
// called: the node's).
func (f AgentsFile) NodeAgents() []node.NamedAgent {
	out := make([]node.NamedAgent, len(f.Agents))
	for i, a := range f.Agents {
		na := node.NamedAgent{Name: a.Name, Description: a.Description, SystemPrompt: a.SystemPrompt,
			Paradigm: a.Paradigm, MaxSteps: a.MaxSteps, Model: a.model, Fallbacks: a.fallbacks, MemoryNamespace: a.Memory, Knowledge: a.Knowledge,
			MaxTokens: a.MaxTokens, LoopRepeats: loopSetting(a.LoopRepeats), LoopStaleSteps: loopSetting(a.LoopStaleSteps), MaxCostUSD: a.MaxCostUSD, MaxSubAgents: a.MaxSubAgents,
			Context: a.Context.Options(), SummaryModel: a.Context.summary,
			MaxRounds: a.MaxRounds, CriticPrompt: a.CriticPrompt, CriticModel: a.critic, LessonsNamespace: a.LessonsNamespace, Lessons: a.Lessons, Evaluate: a.Evaluate,
			EvaluatorPrompt: a.EvaluatorPrompt}
		if a.Tools != nil {
			na.Tools = []string{}
			for _, t := range a.Tools {
				if s, ok := strings.CutPrefix(t, ToolsOfMCP); ok {
					na.MCPServers = append(na.MCPServers, s)
				} else if s, ok := strings.CutPrefix(t, ToolsOfSkill); ok {
					na.Skills = append(na.Skills, s)
				} else {
					na.Tools = append(na.Tools, t)
				}
			}
		}
		na.Approvals = a.Approvals
		// Checked by parseAgent.
		switch d, _ := time.ParseDuration(a.ApprovalTimeout); {
		case a.ApprovalTimeout == "":
		case d == 0:
			na.ApprovalTimeout = node.NoApprovalTimeout
		default:
			na.ApprovalTimeout = d
		}
		if ps := a.PlanSettings; ps != nil {
			na.PlanExecute = actors.PlanExecute{Concurrency: ps.Concurrency, MaxPlanSteps: ps.MaxPlanSteps, MaxReplans: ps.MaxReplans,
				MaxPlanRetries: ps.MaxPlanRetries, MaxDepth: ps.MaxDepth, MaxTotalSteps: ps.MaxTotalSteps, Executor: ps.Executor}
		}
		out[i] = na
	}
	for _, t := range f.Teams {
		tm := t.Team()
		out = append(out, node.NamedAgent{Name: t.Name, Description: t.Description, SystemPrompt: t.SystemPrompt, MaxSteps: t.MaxSteps,
			MaxTokens: t.MaxTokens, MaxCostUSD: t.MaxCostUSD, MaxSubAgents: t.MaxSubAgents, Context: t.Context.Options(), SummaryModel: t.Context.summary, Team: &tm})
	}
	return out
}

// CheckNodeTools checks the file's tools against the tools of the node cfg
// configures (node.Config.Agent: its tools, the skills', the chains', the notes',
// the memory tool's and delegate), its entries mcp:SERVER against the MCP servers of
// cfg.ToolCatalog (an *mcp.Client) and skill:NAME against cfg.Skills, and the
// agents' memory namespaces against the node's memory tool (cfg.MemoryTool), which
// they need. Then it builds the agents as the node will (checkBuild), so that
// whatever checks it, node agents list included, refuses what the node would.
func (f AgentsFile) CheckNodeTools(cfg node.Config) error {
	var servers, skillNames []string
	if c, ok := cfg.ToolCatalog.(*mcp.Client); ok {
		for _, st := range c.Status() {
			servers = append(servers, st.Name)
		}
	}
	for _, s := range cfg.Skills.Skills() {
		skillNames = append(skillNames, s.Name)
	}
	if err := f.checkGroups(servers, skillNames); err != nil {
		return err
	}
	for _, a := range f.Agents {
		if a.Memory != "" && cfg.MemoryTool == nil {
			return &AgentsFileError{Path: f.Path, Line: a.memoryLine, Msg: fmt.Sprintf(
				"agent %q: memory %s: the node has no memory tool: set \"tool\": true in the configuration's \"memory\" section", a.Name, a.Memory)}
		}
	}
	for _, a := range f.Agents {
		if a.Knowledge != "" && cfg.KnowledgeTool == nil {
			return &AgentsFileError{Path: f.Path, Line: a.knowledgeLine, Msg: fmt.Sprintf(
				"agent %q: knowledge %s: the node has no rag tool: set \"tool\": true in the configuration's \"knowledge\" section", a.Name, a.Knowledge)}
		}
	}
	// With the file's agents, the node has the delegate tool too (sub-agents).
	cfg.Agents = f.NodeAgents()
	if err := f.checkGather(cfg); err != nil {
		return err
	}
	def, err := cfg.Agent()
	if err != nil {
		return err
	}
	known := make([]string, len(def.Tools))
	for i, s := range def.Tools {
		known[i] = s.Name
	}
	// A reflexion agent without the node's memory tool hears of the tool first.
	if err := f.checkLessons(cfg); err != nil {
		return err
	}
	if err := f.CheckTools(known); err != nil {
		return err
	}
	return f.checkBuild(cfg)
}

// namedAgentError finds the agent or team a node's error about one names.
var namedAgentError = regexp.MustCompile(`^node: (?:agent|team) "([^"]*)"(,| with|:)`)

// checkBuild builds the agents as the node will (node.Config.AllAgents), so that
// what the node would refuse at its start is refused here, with the same words: a
// setting that is in range alone but not with the node's (a window smaller than
// the node's reserved output), a system prompt that leaves no room in the
// window. The error names the line of the agent (of its context section, for
// its context settings).
func (f AgentsFile) checkBuild(cfg node.Config) error {
	_, err := cfg.AllAgents()
	if err == nil {
		return nil
	}
	m := namedAgentError.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	msg := strings.TrimPrefix(err.Error(), "node: ")
	for _, a := range f.Agents {
		if a.Name != m[1] {
			continue
		}
		line := a.Line
		if a.contextLine != 0 && strings.Contains(msg, "context") {
			line = a.contextLine
		}
		return &AgentsFileError{Path: f.Path, Line: line, Msg: msg}
	}
	for _, t := range f.Teams {
		if t.Name != m[1] {
			continue
		}
		line := t.Line
		if t.contextLine != 0 && strings.Contains(msg, "context") {
			line = t.contextLine
		}
		return &AgentsFileError{Path: f.Path, Line: line, Msg: msg}
	}
	return err
}

// checkLessons reports a reflexion agent that cannot keep its lessons: the node
// has no memory tool, or the agent's tools leave it out.
func (f AgentsFile) checkLessons(cfg node.Config) error {
	for _, a := range f.Agents {
		if a.Paradigm != node.ParadigmReflexion {
			continue
		}
		if cfg.MemoryTool == nil {
			return &AgentsFileError{Path: f.Path, Line: a.paradigmLine, Msg: fmt.Sprintf("agent %q: the reflexion paradigm keeps its lessons with the memory tool, "+
				"which this node does not have: give the node one (the configuration's \"memory\": {\"tool\": true})", a.Name)}
		}
		tool := cmp.Or(cfg.MemoryTool.Name, "memory")
		if cfg.MemoryTool.Expand {
			tool += "_add"
		}
		if a.Tools != nil && !slices.Contains(a.Tools, tool) {
			return &AgentsFileError{Path: f.Path, Line: a.toolsLine, Msg: fmt.Sprintf("agent %q: the reflexion paradigm keeps its lessons with the memory tool: add %s to its tools", a.Name, tool)}
		}
	}
	return nil
}

// checkGather reports an agent whose context section gathers from a source the
// agent does not have (a knowledge base with the rag tool, the memory tool, the
// notes tool), at the line of the setting (cfg.Agents are the file's agents).
func (f AgentsFile) checkGather(cfg node.Config) error {
	for _, a := range f.Agents {
		if a.gatherLine == 0 {
			continue
		}
		if err := cfg.CheckGather(a.Name); err != nil {
			return &AgentsFileError{Path: f.Path, Line: a.gatherLine, Msg: strings.TrimPrefix(err.Error(), "node: ")}
		}
	}
	return nil
}
