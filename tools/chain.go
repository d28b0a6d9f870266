package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// Chain is a declared sequence of tool calls that an agent is offered as one tool.
// Each step calls one tool with arguments rendered from a text/template; the chain's
// result is rendered from its Output template. A chain is configured (cmd/node's
// "chains" section) as
//
//	{"name": "double_then_time",
//	 "description": "Doubles a number, then tells the time.",
//	 "input_schema": {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]},
//	 "steps": [
//	   {"name": "double", "tool": "calculator", "args": "{\"expression\": \"{{.args.n}} * 2\"}"},
//	   {"name": "now", "tool": "clock", "args": "{}"}],
//	 "output": "{{.steps.double.output}} at {{.steps.now.output}}"}
//
// The templates see .args, the chain's arguments (checked against InputSchema), and
// .steps.NAME.output, the result text of each step that ran before, with
// .steps.NAME.json the result parsed when it is JSON (nil otherwise). Two functions
// help: json marshals a value (so {{json .args.query}} is a quoted JSON string), and
// fromjson parses JSON text. A missing key is an error, not "<no value>". A number
// of the JSON the templates read renders as it was written (an ID of 98765432 as
// 98765432, not 9.8765432e+07): in .steps.NAME.json and fromjson's it is a
// json.Number, which compares with a number as a number ({{if gt .steps.a.json.n
// 0}}; integers exactly, past 2^53 too) and with a string as text, and which
// printf formats as a number (%d, %.2f); {{if .steps.a.json.n}} is false for 0
// and true for any other number (with, not, and the and and or an if tests, too),
// and a JSON null renders empty (null through json). In .args a number is an
// int64, or a json.Number for one with a fraction or past int64 (as JSON writes
// its float64: 1234567.5). A session renders a task recorded under older decision
// rules as those builds did (ChainTool.WithNumbers): under 10 (NumbersAsWritten)
// {{if}} held for 0, as for any non-empty text, and a null rendered "<no value>";
// under 1 to 9 (NumbersAsFloats) numbers were float64s.
//
// Run by a session (package actors), every step is an effect of its own, recorded
// when it is requested and when it answers, so a session that restarts mid-chain
// resumes at the first unanswered step. Called as a plain Tool (ChainTool.Call), the
// chain runs all its steps in that one call.
type Chain struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// InputSchema is the JSON Schema (an object schema) of the chain's arguments;
	// empty means any object.
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	Steps       []ChainStep     `json:"steps"`
	// Output renders the chain's result; empty means the last step's result.
	Output string `json:"output,omitempty"`
}

// ChainStep is one step of a Chain: a call of Tool with the arguments Args renders
// (a template whose output must be a JSON object; empty means {}).
type ChainStep struct {
	Name string `json:"name"`
	Tool string `json:"tool"`
	Args string `json:"args,omitempty"`
}

// ErrBadChain is wrapped by every error of Chain.Validate and NewChainTool.
var ErrBadChain = errors.New("tools: bad chain")

// chainFuncs are the functions of every chain template. They are pure: rendering
// the same data gives the same text, which replay verification relies on.
var chainFuncs = template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"fromjson": func(s string) (any, error) { return parseJSON(s, NumbersAsWritten) },
	// A json.Number compares and formats as a number (chainnumbers.go).
	"eq": chainEq,
	"ne": func(a, b any) (bool, error) {
		eq, err := chainEq(a, b)
		return !eq, err
	},
	"lt":     chainOrder("lt", func(c int) bool { return c < 0 }),
	"le":     chainOrder("le", func(c int) bool { return c <= 0 }),
	"gt":     chainOrder("gt", func(c int) bool { return c > 0 }),
	"ge":     chainOrder("ge", func(c int) bool { return c >= 0 }),
	"printf": chainPrintf,
}

// valueFuncs are chainFuncs as the templates of NumbersAsValues have them, with
// the function their if, with, and and or are given (numericTruth).
var valueFuncs = template.FuncMap{
	"fromjson": func(s string) (any, error) { return parseJSON(s, NumbersAsValues) },
	"not":      func(v any) bool { return !chainTruth(v) },
	truthFunc:  chainTruth,
}

// floatFuncs are chainFuncs as the templates of NumbersAsFloats have them.
var floatFuncs = template.FuncMap{
	"fromjson": func(s string) (any, error) { return parseJSON(s, NumbersAsFloats) },
}

// ChainNumbers is how a chain's templates read the numbers of the JSON they parse:
// a step's result (.steps.NAME.json), fromjson's text, and the chain's arguments
// (.args).
type ChainNumbers int

const (
	// NumbersAsWritten reads them as json.Number: a number renders as it was
	// written, and an integer past 2^53 is exact (decision rules 10 on). The
	// arguments' integers that fit stay int64 (ArgumentParser), their other
	// numbers are written as JSON writes their float64 (1234567.5).
	NumbersAsWritten ChainNumbers = iota
	// NumbersAsFloats reads them as float64, as the builds of decision rules 1 to
	// 9 did: 98765432 renders 9.8765432e+07, 1000000 renders 1e+06, and
	// 9007199254740993 becomes 9007199254740992, even through {{json}}; and an
	// argument with a fraction, 1234567.5, renders 1.2345675e+06. A session
	// renders the steps of a task recorded under those rules so, to decide them as
	// they were recorded.
	NumbersAsFloats
	// NumbersAsValues reads them as NumbersAsWritten does, and the templates take
	// a number for its value where they test one: in if, with, not, and and or
	// (within an if's pipeline), 0 is false, as it was as a float64, where under
	// NumbersAsWritten it was true, as any non-empty text. And a JSON null inside a
	// step's JSON, fromjson's or the arguments renders empty (and null through
	// json), where it rendered "<no value>". The chains of decision rules 11 on,
	// and a ChainTool's unless told.
	NumbersAsValues
)

// parseJSON reads s as one JSON value, its numbers read as numbers says. Its error
// is json.Unmarshal's either way.
func parseJSON(s string, numbers ChainNumbers) (any, error) {
	if numbers == NumbersAsValues {
		v, err := parseJSON(s, NumbersAsWritten)
		if err != nil {
			return v, err
		}
		return nullsShown(v), nil
	}
	var v any
	if numbers == NumbersAsFloats {
		err := json.Unmarshal([]byte(s), &v)
		return v, err
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&v); err == nil {
		if _, err := dec.Token(); errors.Is(err, io.EOF) {
			return v, nil
		}
	}
	// Not one JSON value: say why as json.Unmarshal does.
	if err := json.Unmarshal([]byte(s), new(json.RawMessage)); err != nil {
		return nil, err
	}
	return nil, errors.New("tools: not one JSON value")
}

type compiledChain struct {
	args   []*template.Template
	output *template.Template
	// floatArgs and floatOutput are args and output with floatFuncs, for
	// NumbersAsFloats.
	floatArgs   []*template.Template
	floatOutput *template.Template
	// valueArgs and valueOutput are args and output parsed again with valueFuncs
	// and rewritten to take numbers for their values (numericTruth), for
	// NumbersAsValues.
	valueArgs   []*template.Template
	valueOutput *template.Template
	parser      *ArgumentParser
}

// Validate checks the chain alone, without the tools it calls (NewChainTool checks
// those): a callable name, at least one step, step names that are identifiers and
// unique, a tool per step, templates that parse and refer only to steps that ran
// before them, and an object input schema. The error names the chain, the step and
// the problem, and lists every problem found.
func (c Chain) Validate() error {
	_, err := c.compile()
	return err
}

func (c Chain) compile() (*compiledChain, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w %q: %s", ErrBadChain, c.Name, fmt.Sprintf(format, args...)))
	}
	if err := checkToolName(c.Name); err != nil {
		bad("%v", err)
	}
	if strings.TrimSpace(c.Description) == "" {
		bad("the description is empty: the model reads it to know when to call the chain")
	}
	if len(c.Steps) == 0 {
		bad("it has no steps")
	}
	cc := &compiledChain{}
	var err error
	if cc.parser, err = NewArgumentParser(c.Name, c.InputSchema, 0); err != nil {
		bad("input_schema: %v", err)
	}
	var names []string
	for i, s := range c.Steps {
		where := fmt.Sprintf("step %d", i+1)
		if s.Name != "" {
			where = fmt.Sprintf("step %q", s.Name)
		}
		switch {
		case !isIdentifier(s.Name):
			bad("%s: the name must be letters, digits and '_', not starting with a digit (templates refer to it as .steps.NAME)", where)
		case slices.Contains(names, s.Name):
			bad("two steps are named %q", s.Name)
		}
		if s.Tool == "" {
			bad("%s: no tool", where)
		}
		text := s.Args
		if strings.TrimSpace(text) == "" {
			text = "{}"
		}
		t, err := parseChainTemplate(c.Name+"/"+s.Name, text)
		if err != nil {
			bad("%s: args: %v", where, err)
		} else if err := checkStepRefs(t, names, c.Steps, s.Name); err != nil {
			bad("%s: args: %v", where, err)
		}
		cc.args = append(cc.args, t)
		names = append(names, s.Name)
	}
	if c.Output != "" {
		t, err := parseChainTemplate(c.Name+"/output", c.Output)
		if err != nil {
			bad("output: %v", err)
		} else if err := checkStepRefs(t, names, c.Steps, ""); err != nil {
			bad("output: %v", err)
		}
		cc.output = t
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, t := range cc.args {
		cc.floatArgs = append(cc.floatArgs, asFloats(t))
		cc.valueArgs = append(cc.valueArgs, asValues(t))
	}
	if cc.output != nil {
		cc.floatOutput = asFloats(cc.output)
		cc.valueOutput = asValues(cc.output)
	}
	return cc, nil
}

// asFloats is t for NumbersAsFloats: a clone with floatFuncs.
func asFloats(t *template.Template) *template.Template {
	return cloneChainTemplate(t).Funcs(floatFuncs)
}

// asValues is t for NumbersAsValues: a clone with valueFuncs, rewritten to take
// numbers for their values (numericTruth). Its parse trees are copied, not parsed
// again: a clone alone shares its trees with t, which numericTruth rewrites.
func asValues(t *template.Template) *template.Template {
	v := cloneChainTemplate(t)
	for _, tt := range v.Templates() {
		tt.Tree = tt.Tree.Copy()
	}
	numericTruth(v.Funcs(valueFuncs))
	return v
}

func cloneChainTemplate(t *template.Template) *template.Template {
	c, err := t.Clone()
	if err != nil {
		panic(fmt.Sprintf("tools: clone a chain's template that was never executed: %v", err))
	}
	return c
}

func isIdentifier(s string) bool {
	if s == "" || isDigit(s[0]) {
		return false
	}
	for _, c := range []byte(s) {
		if !isLetter(c) && !isDigit(c) {
			return false
		}
	}
	return true
}

func parseChainTemplate(name, text string) (*template.Template, error) {
	t, err := template.New(name).Funcs(chainFuncs).Option("missingkey=error").Parse(text)
	if err != nil {
		// "template: chain/step:1: ..." says the line; the name is said by the caller.
		return nil, errors.New(strings.TrimPrefix(err.Error(), "template: "))
	}
	return t, nil
}

// checkStepRefs fails when the template refers (as .steps.NAME or $.steps.NAME, where
// dot is the template's data) to a step that is not among before: a later step, the
// step itself or a step that does not exist.
func checkStepRefs(t *template.Template, before []string, all []ChainStep, self string) error {
	var err error
	check := func(ident []string) {
		if err != nil || len(ident) < 2 || ident[0] != "steps" {
			return
		}
		name := ident[1]
		switch {
		case slices.Contains(before, name):
		case name == self:
			err = fmt.Errorf("refers to its own step %q: a step sees only the steps before it", name)
		case slices.ContainsFunc(all, func(s ChainStep) bool { return s.Name == name }):
			err = fmt.Errorf("refers to step %q, which runs after it: a step sees only the steps before it", name)
		default:
			err = fmt.Errorf("refers to step %q, which the chain does not have (its steps: %s)", name, stepNames(all))
		}
	}
	var walk func(n parse.Node, root bool)
	walk = func(n parse.Node, root bool) {
		switch n := n.(type) {
		case *parse.ListNode:
			if n != nil {
				for _, c := range n.Nodes {
					walk(c, root)
				}
			}
		case *parse.ActionNode:
			walk(n.Pipe, root)
		case *parse.PipeNode:
			if n != nil {
				for _, c := range n.Cmds {
					walk(c, root)
				}
			}
		case *parse.CommandNode:
			// index .steps "NAME" (or $.steps) names a step as .steps.NAME does.
			if len(n.Args) >= 3 && root {
				if id, ok := n.Args[0].(*parse.IdentifierNode); ok && id.Ident == "index" {
					if s, ok := n.Args[2].(*parse.StringNode); ok && isStepsMap(n.Args[1]) {
						check([]string{"steps", s.Text})
					}
				}
			}
			for _, a := range n.Args {
				walk(a, root)
			}
		case *parse.TemplateNode:
			if t.Lookup(n.Name) == nil && err == nil {
				err = fmt.Errorf("calls the template %q, which it does not define", n.Name)
			}
			walk(n.Pipe, root)
		case *parse.FieldNode:
			if root {
				check(n.Ident)
			}
		case *parse.VariableNode:
			if len(n.Ident) > 0 && n.Ident[0] == "$" {
				check(n.Ident[1:])
			}
		case *parse.ChainNode:
			walk(n.Node, root)
		case *parse.IfNode:
			walk(n.Pipe, root)
			walk(n.List, root)
			walk(n.ElseList, root)
		case *parse.RangeNode:
			walk(n.Pipe, root)
			walk(n.List, false)
			walk(n.ElseList, root)
		case *parse.WithNode:
			walk(n.Pipe, root)
			walk(n.List, false)
			walk(n.ElseList, root)
		}
	}
	// The template and those it defines ({{define "x"}}), which see what it passes.
	for _, d := range t.Templates() {
		if d.Tree != nil {
			walk(d.Root, true)
		}
	}
	return err
}

// isStepsMap reports whether n is .steps or $.steps, the map of the steps' results.
func isStepsMap(n parse.Node) bool {
	switch n := n.(type) {
	case *parse.FieldNode:
		return len(n.Ident) == 1 && n.Ident[0] == "steps"
	case *parse.VariableNode:
		return len(n.Ident) == 2 && n.Ident[0] == "$" && n.Ident[1] == "steps"
	}
	return false
}

func stepNames(steps []ChainStep) string {
	names := make([]string, len(steps))
	for i, s := range steps {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

// ValidateChains validates each chain and fails on two chains with the same name,
// naming every problem.
func ValidateChains(chains []Chain) error {
	_, err := compileChains(chains)
	return err
}

// compileChains is ValidateChains returning each chain compiled, so that
// NewChainTools parses each chain's templates once.
func compileChains(chains []Chain) ([]*compiledChain, error) {
	var errs []error
	seen := map[string]bool{}
	ccs := make([]*compiledChain, len(chains))
	for i, c := range chains {
		cc, err := c.compile()
		if err != nil {
			errs = append(errs, err)
		}
		ccs[i] = cc
		if seen[c.Name] {
			errs = append(errs, fmt.Errorf("%w %q: two chains have this name", ErrBadChain, c.Name))
		}
		seen[c.Name] = true
	}
	return ccs, errors.Join(errs...)
}

// ChainTool is a Chain ready to run: its templates parsed, its steps' tools found.
// It is a Tool (calling it runs every step in one call); a session runs it step by
// step instead, through StepArguments and Result. It is immutable and safe for
// concurrent use.
type ChainTool struct {
	chain Chain
	cc    *compiledChain
	tools []Tool // of each step
	spec  messages.ToolSpec
	// maxOutput bounds the chain's result: the largest MaxOutput of its steps'
	// tools, at least DefaultMaxOutput.
	maxOutput int
	// timeout bounds a run of every step in one call: the sum of the steps'
	// timeouts (stepTimeout for a step whose tool sets none).
	timeout time.Duration
	// numbers is how its templates read the numbers of JSON (WithNumbers).
	numbers ChainNumbers
	// arguments is how its arguments are read (WithArguments).
	arguments ArgumentRules
}

// stepTimeout is what a chain run in one call (ChainTool.Call) counts for a step
// whose tool sets no timeout: the default of the node's tool performer
// (actors.LocalEffectsConfig.ToolTimeout).
const stepTimeout = 30 * time.Second

var (
	_ Tool      = (*ChainTool)(nil)
	_ Effectful = (*ChainTool)(nil)
	_ Limits    = (*ChainTool)(nil)
)

// NewChainTool validates c (Validate) and finds the tool of each step with lookup.
// A step may not call a tool lookup does not know, nor another chain.
func NewChainTool(c Chain, lookup func(name string) (Tool, bool)) (*ChainTool, error) {
	cc, err := c.compile()
	return newChainTool(c, cc, err, lookup)
}

// newChainTool is NewChainTool with c compiled already (cc, or its error err).
func newChainTool(c Chain, cc *compiledChain, err error, lookup func(name string) (Tool, bool)) (*ChainTool, error) {
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	ct := &ChainTool{chain: c, cc: cc, maxOutput: DefaultMaxOutput, numbers: NumbersAsValues}
	for i, s := range c.Steps {
		if s.Tool == "" {
			continue
		}
		t, ok := lookup(s.Tool)
		if !ok {
			errs = append(errs, fmt.Errorf("%w %q: step %q calls the tool %q, which the agent does not have", ErrBadChain, c.Name, s.Name, s.Tool))
			continue
		}
		if _, nested := t.(*ChainTool); nested {
			errs = append(errs, fmt.Errorf("%w %q: step %q calls the chain %q: a step calls a tool, not a chain", ErrBadChain, c.Name, s.Name, s.Tool))
			continue
		}
		if ct.tools == nil {
			ct.tools = make([]Tool, len(c.Steps))
		}
		ct.tools[i] = t
		lim := LimitsOf(t)
		ct.maxOutput = max(ct.maxOutput, lim.MaxOutput)
		if lim.Timeout <= 0 {
			lim.Timeout = stepTimeout
		}
		ct.timeout += lim.Timeout
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	params := json.RawMessage(`{"type":"object"}`)
	if len(bytes.TrimSpace(c.InputSchema)) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, c.InputSchema); err != nil {
			return nil, fmt.Errorf("%w %q: input_schema: %w", ErrBadChain, c.Name, err)
		}
		params = buf.Bytes()
	}
	desc := strings.TrimSpace(c.Description)
	ct.spec = messages.ToolSpec{Name: c.Name, Description: desc, Parameters: params}
	return ct, nil
}

// ChainCatalog is where a chain's step finds a tool that is not among the tools the
// chain is built with: a catalog whose tools come and go while the node runs (the
// MCP servers' tools, mcp.Client). Implementations are safe for concurrent use.
type ChainCatalog interface {
	// Owns reports whether name is one the catalog may offer a tool under (for an
	// MCP client, "<server>__<tool>" for a configured server), whether or not it
	// offers it now.
	Owns(name string) bool
	// Tool returns the tool with that name, if the catalog offers it now.
	Tool(name string) (Tool, bool)
}

// ChainOption configures NewChainTools.
type ChainOption func(*chainOptions)

type chainOptions struct{ catalog ChainCatalog }

// WithStepCatalog lets a step call a tool of cat: one that is not among the
// available tools but whose name cat owns. It is looked up in cat at each call of
// the step; a step whose tool cat does not offer then fails, naming the step.
func WithStepCatalog(cat ChainCatalog) ChainOption {
	return func(o *chainOptions) { o.catalog = cat }
}

// NewChainTools makes the chains' tools, each step calling one of available (or,
// WithStepCatalog, of a catalog).
func NewChainTools(chains []Chain, available []Tool, opts ...ChainOption) ([]*ChainTool, error) {
	ccs, err := compileChains(chains)
	if err != nil {
		return nil, err
	}
	var o chainOptions
	for _, opt := range opts {
		opt(&o)
	}
	byName := make(map[string]Tool, len(available))
	for _, t := range available {
		byName[t.Spec().Name] = t
	}
	lookup := func(name string) (Tool, bool) {
		if t, ok := byName[name]; ok {
			return t, true
		}
		if o.catalog != nil && o.catalog.Owns(name) {
			return catalogStep{cat: o.catalog, name: name}, true
		}
		return nil, false
	}
	var errs []error
	out := make([]*ChainTool, 0, len(chains))
	for i, c := range chains {
		if _, clash := byName[c.Name]; clash {
			errs = append(errs, fmt.Errorf("%w %q: a tool has this name already", ErrBadChain, c.Name))
			continue
		}
		ct, err := newChainTool(c, ccs[i], nil, lookup)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, ct)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// ErrNotInCatalog is the error of a step whose tool its catalog does not offer when
// the step is called (WithStepCatalog).
var ErrNotInCatalog = errors.New("the tool is not in the catalog")

// catalogStep is the tool of a step that calls a tool of a ChainCatalog: looked up
// at each call, since the catalog's tools come and go.
type catalogStep struct {
	cat  ChainCatalog
	name string
}

func (s catalogStep) Spec() messages.ToolSpec {
	if t, ok := s.cat.Tool(s.name); ok {
		return t.Spec()
	}
	return messages.ToolSpec{Name: s.name}
}

func (s catalogStep) Call(ctx context.Context, c Call) (string, error) {
	t, ok := s.cat.Tool(s.name)
	if !ok {
		return "", fmt.Errorf("%w now: %q (its server is down or no longer offers it)", ErrNotInCatalog, s.name)
	}
	return t.Call(ctx, c)
}

// Spec implements Tool.
func (t *ChainTool) Spec() messages.ToolSpec {
	s := t.spec
	s.Parameters = bytes.Clone(s.Parameters)
	return s
}

// Limits implements Limits: the chain's result is bounded as its steps' results
// are, by the largest MaxOutput of their tools (at least DefaultMaxOutput), so a
// chain that passes on a step's result gives it as the step's tool would; and a run
// of every step in one call (Call) by the sum of their timeouts, each step by its
// own tool's (Call), so that steps each within their time are not cut short
// together. A session's steps are calls of their own, each under its tool's limits.
func (t *ChainTool) Limits() CallLimits {
	return CallLimits{MaxOutput: t.maxOutput, Timeout: t.timeout}
}

// SideEffects implements Effectful: whether a step's tool has side effects.
func (t *ChainTool) SideEffects() bool {
	return slices.ContainsFunc(t.tools, HasSideEffects)
}

// WithNumbers returns the chain with its templates reading the numbers of the JSON
// they parse as numbers says (NumbersAsValues unless told). t is not changed.
func (t *ChainTool) WithNumbers(numbers ChainNumbers) *ChainTool {
	if t.numbers == numbers {
		return t
	}
	c := *t
	c.numbers = numbers
	return &c
}

// WithArguments returns the chain reading its arguments as rules says
// (ArgumentsExact unless told). t is not changed.
func (t *ChainTool) WithArguments(rules ArgumentRules) *ChainTool {
	if t.arguments == rules {
		return t
	}
	c := *t
	c.arguments = rules
	return &c
}

// Steps returns the chain's steps. The caller must not modify them.
func (t *ChainTool) Steps() []ChainStep { return t.chain.Steps }

// ParseArguments reads the chain's arguments (a model's raw text) against its input
// schema.
func (t *ChainTool) ParseArguments(raw string) (map[string]any, error) {
	return t.cc.parser.WithRules(t.arguments).Parse(raw)
}

// StepArguments renders the arguments of step i (0-based) from the chain's parsed
// arguments and the results of steps 0..i-1 (outputs, at least i long). The text is a
// compact JSON object. It is a pure function of its inputs.
func (t *ChainTool) StepArguments(i int, args map[string]any, outputs []string) (string, error) {
	tmpl := t.cc.args[i]
	switch t.numbers {
	case NumbersAsFloats:
		tmpl = t.cc.floatArgs[i]
	case NumbersAsValues:
		tmpl = t.cc.valueArgs[i]
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, chainData(t.chain.Steps, args, outputs[:i], t.numbers)); err != nil {
		return "", fmt.Errorf("rendering its args: %w", templateProblem(err))
	}
	var out bytes.Buffer
	if err := json.Compact(&out, buf.Bytes()); err != nil || out.Len() == 0 || out.Bytes()[0] != '{' {
		return "", fmt.Errorf("its args rendered %s, not a JSON object (write {{json .VALUE}} to quote a value)", clipText(buf.String()))
	}
	return out.String(), nil
}

// Result renders the chain's result from its arguments and every step's result,
// cut as a tool's output is (Truncate) to the chain's MaxOutput (Limits): an output
// template that repeats a large step's result gives the model no more than a tool
// may.
func (t *ChainTool) Result(args map[string]any, outputs []string) (string, error) {
	if t.cc.output == nil {
		return Truncate(outputs[len(outputs)-1], t.maxOutput), nil
	}
	tmpl := t.cc.output
	switch t.numbers {
	case NumbersAsFloats:
		tmpl = t.cc.floatOutput
	case NumbersAsValues:
		tmpl = t.cc.valueOutput
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, chainData(t.chain.Steps, args, outputs, t.numbers)); err != nil {
		return "", fmt.Errorf("chain %s: rendering its output: %w", t.chain.Name, templateProblem(err))
	}
	return Truncate(buf.String(), t.maxOutput), nil
}

// StepError is the error a chain ends with when its step i fails with err.
func (t *ChainTool) StepError(i int, err string) string {
	return t.stepPrefix(i) + ": " + err
}

func (t *ChainTool) stepPrefix(i int) string {
	s := t.chain.Steps[i]
	return fmt.Sprintf("chain %s stopped at step %d of %d, %q (%s)", t.chain.Name, i+1, len(t.chain.Steps), s.Name, s.Tool)
}

// Call implements Tool: it runs every step, in order, in this one call; step i is
// called as c is, for its agent (c.Agent), with its own arguments, the key c.Key +
// "#" + its name and, when c has one, the outward name c.Outward + "#" + its name.
// Prefer a session's step-by-step run (package actors), which records each step.
func (t *ChainTool) Call(ctx context.Context, c Call) (string, error) {
	args, err := t.ParseArguments(c.Arguments)
	if err != nil {
		return "", err
	}
	var outputs []string
	for i, s := range t.chain.Steps {
		raw, err := t.StepArguments(i, args, outputs)
		if err != nil {
			return "", errors.New(t.StepError(i, err.Error()))
		}
		step := c // for the same agent as the chain's call
		step.Key, step.Arguments = c.Key+"#"+s.Name, raw
		if c.Outward != "" {
			step.Outward = c.Outward + "#" + s.Name
		}
		out, err := t.callStep(ctx, i, step)
		if err != nil {
			return "", fmt.Errorf("%s: %w", t.stepPrefix(i), err)
		}
		outputs = append(outputs, out)
	}
	return t.Result(args, outputs)
}

// callStep calls step i's tool under its own limits, as a session's performer
// does (CallLimited): arguments past its bound are refused, the call is timed by
// its timeout, and its result (or error) is cut to its output bound, so that the
// later steps' templates see what they would see in a session.
func (t *ChainTool) callStep(ctx context.Context, i int, c Call) (string, error) {
	out, err := CallLimited(ctx, t.tools[i], t.chain.Steps[i].Tool, c)
	if err != nil {
		return "", err
	}
	return out, nil
}

// chainData is what a chain's templates see: .args and .steps.NAME.{output,json},
// the numbers of .json read as numbers says.
func chainData(steps []ChainStep, args map[string]any, outputs []string, numbers ChainNumbers) map[string]any {
	st := make(map[string]any, len(outputs))
	for i, out := range outputs {
		parsed, err := parseJSON(out, numbers)
		if err != nil {
			parsed = nil
		}
		st[steps[i].Name] = map[string]any{"output": out, "json": parsed}
	}
	if args == nil {
		args = map[string]any{}
	}
	if numbers != NumbersAsFloats {
		w, _ := floatsWritten(args)
		args = w.(map[string]any)
	}
	if numbers == NumbersAsValues {
		args = nullsShown(args).(map[string]any)
	}
	return map[string]any{"args": args, "steps": st}
}

// floatsWritten returns v with each float64 in it made the json.Number that
// encoding/json writes for it, copying the maps and slices that hold one, and
// whether there was one: the arguments' parser reads a number with a fraction, or
// past int64, as a float64, which a template prints in exponent form (1234567.5
// as 1.2345675e+06), where JSON writes 1234567.5.
func floatsWritten(v any) (any, bool) {
	switch x := v.(type) {
	case float64:
		b, err := json.Marshal(x)
		if err != nil {
			return x, false
		}
		return json.Number(b), true
	case map[string]any:
		var out map[string]any
		for k, e := range x {
			if w, changed := floatsWritten(e); changed {
				if out == nil {
					out = maps.Clone(x)
				}
				out[k] = w
			}
		}
		if out == nil {
			return x, false
		}
		return out, true
	case []any:
		var out []any
		for i, e := range x {
			if w, changed := floatsWritten(e); changed {
				if out == nil {
					out = slices.Clone(x)
				}
				out[i] = w
			}
		}
		if out == nil {
			return x, false
		}
		return out, true
	}
	return v, false
}

// templateProblem drops text/template's "template: NAME:LINE:COL: executing "NAME""
// preamble, keeping where in the template and what went wrong: `at <.args.q>: map
// has no entry for key "q"`.
func templateProblem(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, " at <"); i >= 0 && strings.HasPrefix(msg, "template: ") {
		msg = msg[i+1:]
	}
	return errors.New(msg)
}

func clipText(s string) string {
	if len(s) > 80 {
		return fmt.Sprintf("%q…", s[:80])
	}
	return fmt.Sprintf("%q", s)
}
