package actors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// A plan is the planner's answer of a plan_execute task (planexec.go): steps with
// dependencies, a DAG. This file parses and checks one; both are pure functions of
// the answer's text and of what the agent has, so a refold or a replay of the task
// accepts and refuses exactly the plans the live run did.

// planStep is one step of a plan as the planner wrote it.
type planStep struct {
	// ID names the step in the plan ("s1"; "s3.1" for a part of s3 split by a re-plan).
	ID string `json:"id"`
	// Goal says what the step is for; for a step with neither Tool nor Agent, it is
	// the whole step.
	Goal string `json:"goal,omitempty"`
	// Tool is the tool a step calls with Args; Agent the agent it delegates its goal to.
	Tool  string          `json:"tool,omitempty"`
	Args  json.RawMessage `json:"args,omitempty"`
	Agent string          `json:"agent,omitempty"`
	// Deps are the steps whose results it needs (it runs once they all finished).
	Deps []string `json:"deps"`
	// Expect, when set, is a text the step's result must contain: a result without
	// it contradicts the plan, which is then re-planned as after a failed step.
	Expect string `json:"expect,omitempty"`
}

// plan is a planner's answer.
type plan struct {
	Steps []planStep `json:"steps"`
	// Answer says how the final answer is written from the steps' results.
	Answer string `json:"answer,omitempty"`
}

// planLimits are what a plan is checked against.
type planLimits struct {
	maxSteps int // steps in the plan
	maxDepth int // dots in a step's ID
	// maxNew bounds the plan's steps that are not kept from the previous plan.
	maxNew int
	// hasTool reports whether the agent has a tool, chain whether a call of it with
	// these arguments runs a tool chain (which the session runs only for the loop);
	// agents names the agents a step may delegate to (empty: none).
	hasTool func(string) bool
	chain   func(tool, args string) bool
	// approval reports whether the agent's calls of a tool wait for a human's
	// approval, which only its loop asks for.
	approval func(tool, args string) bool
	agents   []string
	// delegate reports whether the agent can delegate (it has the delegate tool).
	delegate bool
	// kept are the finished steps of the plan being revised, in its order: they stay
	// as they ran, whatever the new plan says of them.
	kept []planStep
}

// isKept reports whether step id is one of the kept steps.
func (l planLimits) isKept(id string) bool {
	return slices.ContainsFunc(l.kept, func(s planStep) bool { return s.ID == id })
}

var (
	stepIDPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,31}(\.[A-Za-z0-9_-]{1,16})*$`)
	stepRef       = regexp.MustCompile(`\{\{\s*([A-Za-z][A-Za-z0-9_.-]*)\s*\}\}`)
	jsonFence     = regexp.MustCompile("(?s)```(?:json|JSON)?\\s*\n(.*?)```")
)

// planText returns the JSON of a planner's answer under decision rules: from
// rules 16 (rulesPlanJSONBody) the object holding "steps" as a verdict's is read
// (jsonBody: the whole answer, a fence's, or the one that starts at the first
// '{' or ends at the last '}'), and when that is no plan (isPlanObject) the
// first ```json fence's content as under 15, else the first object that is one
// (planObject); under older rules the content of its first
// ```json fence when it has one, else the text from its first '{' to its last
// '}', so that braces in the prose before the plan ("the {{s1}} syntax") made
// it unreadable and cost a retry.
func planText(rules int, answer string) string {
	if rules >= rulesPlanJSONBody {
		body := jsonBody(rules, answer, "steps")
		if isPlanObject(body) {
			return body
		}
		// jsonBody takes a "```" in the prose for a fence, and tries the
		// objectTries innermost '{' before the last '}' only: a plan of more
		// objects than that after prose holding braces ("{{s1}}"), or fenced
		// after prose naming a "```", is found here.
		if m := jsonFence.FindStringSubmatch(answer); m != nil && isPlanObject(strings.TrimSpace(m[1])) {
			return strings.TrimSpace(m[1])
		}
		if plan, ok := planObject(answer); ok {
			return plan
		}
		return body
	}
	if m := jsonFence.FindStringSubmatch(answer); m != nil {
		return strings.TrimSpace(m[1])
	}
	i, j := strings.IndexByte(answer, '{'), strings.LastIndexByte(answer, '}')
	if i < 0 || j < i {
		return strings.TrimSpace(answer)
	}
	return answer[i : j+1]
}

// isPlanObject reports whether text is a JSON object whose "steps" is a
// non-empty array: a plan, not an example's {"steps": []}.
func isPlanObject(text string) bool {
	if !strings.HasPrefix(text, "{") {
		return false
	}
	var p struct {
		Steps []json.RawMessage `json:"steps"`
	}
	return json.Unmarshal([]byte(text), &p) == nil && len(p.Steps) > 0
}

// planObject returns the first JSON object in answer that is a plan
// (isPlanObject), trying the '{' that open a key ('{' then '"', spaces
// between), objectTries of them at most: prose braces ("{{s1}}") cost no
// read, and an object read whole that is no plan is stepped over.
func planObject(answer string) (string, bool) {
	for at, tries := 0, 0; tries < objectTries; {
		i := strings.IndexByte(answer[at:], '{')
		if i < 0 {
			break
		}
		at += i
		if rest := strings.TrimLeft(answer[at+1:], " \t\r\n"); !strings.HasPrefix(rest, `"`) {
			at++
			continue
		}
		tries++
		var obj json.RawMessage
		dec := json.NewDecoder(strings.NewReader(answer[at:]))
		if dec.Decode(&obj) != nil {
			at++
			continue
		}
		if isPlanObject(string(obj)) {
			return string(obj), true
		}
		at += int(dec.InputOffset())
	}
	return "", false
}

// parsePlan reads and checks a planner's answer under decision rules (planText).
// The error says what is wrong in words the planner can act on; it goes back to it.
func parsePlan(rules int, answer string, lim planLimits) (plan, error) {
	var p plan
	text := planText(rules, answer)
	dec := json.NewDecoder(strings.NewReader(text))
	if err := dec.Decode(&p); err != nil {
		return plan{}, fmt.Errorf("it is not a JSON object of the plan's shape: %v", err)
	}
	if dec.More() {
		return plan{}, fmt.Errorf("it has text after the plan's JSON object: answer with one object")
	}
	if len(p.Steps) == 0 {
		return plan{}, fmt.Errorf("the plan has no steps")
	}
	// The finished steps of a revised plan stay as they ran, in their order, first.
	steps := slices.Clone(lim.kept)
	fresh := 0
	for _, s := range p.Steps {
		if lim.isKept(s.ID) {
			continue
		}
		steps = append(steps, s)
		fresh++
	}
	if len(steps) > lim.maxSteps {
		return plan{}, fmt.Errorf("the plan has %d steps, more than the %d allowed: combine steps", len(steps), lim.maxSteps)
	}
	if fresh > lim.maxNew {
		return plan{}, fmt.Errorf("the plan adds %d steps, more than the %d this task may still run", fresh, lim.maxNew)
	}
	ids := make(map[string]bool, len(steps))
	for _, s := range steps {
		switch {
		case !stepIDPattern.MatchString(s.ID):
			return plan{}, fmt.Errorf("step ID %q: want a letter, then letters, digits, '_' or '-' (a part of step s3 is s3.1, s3.2, …)", s.ID)
		case ids[s.ID]:
			return plan{}, fmt.Errorf("step ID %q is used twice", s.ID)
		case strings.Count(s.ID, ".") > lim.maxDepth:
			return plan{}, fmt.Errorf("step %s: steps may be split %d levels deep at most", s.ID, lim.maxDepth)
		}
		ids[s.ID] = true
	}
	for i := range steps {
		s := &steps[i]
		if lim.isKept(s.ID) {
			continue
		}
		if err := checkStep(s, lim); err != nil {
			return plan{}, fmt.Errorf("step %s: %w", s.ID, err)
		}
		// A dependency on a step split into parts is a dependency on its parts.
		var deps []string
		for _, d := range s.Deps {
			parts := partsOf(d, ids)
			switch {
			case d == s.ID:
				return plan{}, fmt.Errorf("step %s depends on itself", s.ID)
			case ids[d]:
				deps = append(deps, d)
			case len(parts) > 0:
				deps = append(deps, parts...)
			default:
				return plan{}, fmt.Errorf("step %s depends on %q, which is not a step of the plan", s.ID, d)
			}
		}
		slices.Sort(deps)
		s.Deps = slices.Compact(deps)
		for _, m := range stepRef.FindAllStringSubmatch(string(s.Args), -1) {
			if !slices.Contains(s.Deps, m[1]) && !slices.ContainsFunc(s.Deps, func(d string) bool { return strings.HasPrefix(d, m[1]+".") }) {
				return plan{}, fmt.Errorf("step %s: its args quote {{%s}}, which is not among its deps", s.ID, m[1])
			}
			if rules < rulesQuotedParts || slices.Contains(s.Deps, m[1]) {
				continue
			}
			// The quote is every part's result (resultOf): the step waits for them all.
			for _, part := range partsOf(m[1], ids) {
				if !slices.Contains(s.Deps, part) {
					return plan{}, fmt.Errorf("step %s: its args quote {{%s}}, whose part %s is not among its deps: depend on %s (all its parts) or quote the part it waits for", s.ID, m[1], part, m[1])
				}
			}
		}
	}
	if cycle := findCycle(steps); cycle != nil {
		return plan{}, fmt.Errorf("the steps' dependencies form a cycle: %s", strings.Join(cycle, " → "))
	}
	p.Steps = steps
	return p, nil
}

// checkStep checks what a step does.
func checkStep(s *planStep, lim planLimits) error {
	switch {
	case s.Tool != "" && s.Agent != "":
		return fmt.Errorf("it names both a tool and an agent: one of them, or neither")
	case s.Tool != "":
		if !lim.hasTool(s.Tool) {
			return fmt.Errorf("unknown tool %q", s.Tool)
		}
		if len(bytes.TrimSpace(s.Args)) == 0 || string(bytes.TrimSpace(s.Args)) == "null" {
			s.Args = json.RawMessage(`{}`)
		}
		var compact bytes.Buffer
		if json.Compact(&compact, s.Args) != nil || compact.Bytes()[0] != '{' {
			return fmt.Errorf("args: want a JSON object (the tool's arguments)")
		}
		s.Args = compact.Bytes()
		if lim.approval != nil && lim.approval(s.Tool, string(s.Args)) {
			return fmt.Errorf("tool %q needs a human's approval, which a step calling it cannot wait for: give its work to a step with only a goal", s.Tool)
		}
		if lim.chain != nil && lim.chain(s.Tool, string(s.Args)) {
			return fmt.Errorf("tool %q runs a tool chain, which a step cannot call: plan the chain's steps as steps", s.Tool)
		}
	case s.Agent != "":
		if !lim.delegate {
			return fmt.Errorf("it names agent %q, but this agent cannot delegate (it has no %s tool)", s.Agent, DelegateTool)
		}
		if !slices.Contains(lim.agents, s.Agent) {
			return fmt.Errorf("unknown agent %q; the agents are %s", s.Agent, strings.Join(lim.agents, ", "))
		}
		fallthrough
	default:
		if len(s.Args) > 0 {
			return fmt.Errorf("args are for a step that calls a tool")
		}
		if strings.TrimSpace(s.Goal) == "" {
			return fmt.Errorf("a step without a tool needs a goal")
		}
	}
	return nil
}

// partsOf returns the steps among ids that are parts of step id (id.1, id.2, …).
func partsOf(id string, ids map[string]bool) []string {
	var out []string
	for other := range ids {
		if strings.HasPrefix(other, id+".") {
			out = append(out, other)
		}
	}
	slices.Sort(out)
	return out
}

// findCycle returns a cycle of the steps' dependencies (its first step repeated at
// its end), or nil when there is none. Steps are visited in plan order, so the same
// plan reports the same cycle.
func findCycle(steps []planStep) []string {
	deps := make(map[string][]string, len(steps))
	for _, s := range steps {
		deps[s.ID] = s.Deps
	}
	const (
		unseen = iota
		open
		closed
	)
	mark := make(map[string]int, len(steps))
	var stack []string
	var visit func(id string) []string
	visit = func(id string) []string {
		mark[id] = open
		stack = append(stack, id)
		for _, d := range deps[id] {
			switch mark[d] {
			case open:
				i := slices.Index(stack, d)
				return append(slices.Clone(stack[i:]), d)
			case unseen:
				if c := visit(d); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		mark[id] = closed
		return nil
	}
	for _, s := range steps {
		if mark[s.ID] == unseen {
			if c := visit(s.ID); c != nil {
				return c
			}
		}
	}
	return nil
}

// renderArgs returns a tool step's arguments with each {{id}} in its strings
// replaced by that step's result (result). The output is compact JSON with sorted
// keys: the same plan and results give the same bytes.
func renderArgs(args json.RawMessage, result func(id string) string) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	var walk func(any) any
	walk = func(x any) any {
		switch x := x.(type) {
		case string:
			return stepRef.ReplaceAllStringFunc(x, func(m string) string {
				return result(stepRef.FindStringSubmatch(m)[1])
			})
		case map[string]any:
			for k, e := range x {
				x[k] = walk(e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		}
		return x
	}
	b, err := json.Marshal(walk(v))
	if err != nil {
		return "", err
	}
	return string(b), nil
}
