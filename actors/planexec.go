package actors

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/troupe-run/troupe/internal/textclip"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// The plan_execute paradigm works a task in three moves, each a recorded event:
//
//   - a planner call (ModelRequested purpose "plan") answers with a plan: steps with
//     dependencies (plan.go). The plan is checked in the fold: its JSON, its IDs, that
//     its tools and agents are the agent's, its size, and that it has no cycle. A plan
//     that fails a check goes back to the planner with the reason (purpose "plan"
//     again, its prompt showing the previous answer, clipped), MaxPlanRetries times at most;
//   - the steps run as their dependencies finish, Concurrency of them at once (the
//     ready step on the longest chain of steps waiting for it first). A step
//     that names a tool is a call of it with its args (ToolCallRequested purpose
//     "step", its call ID the step's ID), which may quote the results of its deps as
//     {{id}}; one that names an agent delegates its goal and its deps' results to it
//     (a call of the delegate tool); one with only a goal is a small loop of its own:
//     delegated to the Executor agent when there is one, else worked by the agent's
//     own tool loop (its goal joins the conversation and the loop runs to an answer,
//     which is the step's result), one such step at a time;
//   - once every step finished, a last call (purpose "answer") writes the task's
//     answer from the task and the steps' results.
//
// A step that fails, or whose result lacks what the plan expected of it (a step's
// "expect"), sends the plan back to the planner (purpose "replan") once the steps in
// flight finished: it is shown the plan, the results so far and the failure, and
// answers with a new plan. The finished steps stay as they ran; the others may be
// replaced, and the failed step may be split into parts (s3.1, s3.2, …; a step
// depending on s3 then depends on its parts), MaxDepth levels deep and
// MaxTotalSteps steps in all over the task. A task is re-planned MaxReplans times
// at most; a failure after that ends it with messages.ReasonPlanFailed.

// Purposes of the plan_execute paradigm's model and tool calls.
const (
	PurposePlan   = "plan"
	PurposeReplan = "replan"
	PurposeAnswer = "answer"
	PurposeStep   = "step"
)

// PlanExecute is the plan_execute paradigm (Agent.Paradigm). Its zero value is
// usable: each zero field takes its default.
type PlanExecute struct {
	// Concurrency bounds the steps running at once (default 4). The session's
	// MaxParallelTools bounds the tool calls it performs at once, too.
	Concurrency int
	// MaxPlanSteps bounds the steps of a plan (default 20).
	MaxPlanSteps int
	// MaxReplans bounds the re-plans of a task (default 2); MaxPlanRetries the
	// planner's answers refused in a row (default 2).
	MaxReplans     int
	MaxPlanRetries int
	// MaxDepth bounds how deep a re-plan may split a step (default 2: s3.1.2);
	// MaxTotalSteps the steps a task's plans may have in all (default twice
	// MaxPlanSteps).
	MaxDepth      int
	MaxTotalSteps int
	// Executor, when set, is the agent a step with only a goal is delegated to.
	Executor string
	// Agents are the agents a step may name, with what each does (for the planner's
	// prompt). A step naming one is a call of the delegate tool, which the agent
	// needs among its tools.
	Agents map[string]string
}

// Name implements Paradigm.
func (PlanExecute) Name() string { return "plan_execute" }

func (p PlanExecute) withDefaults() PlanExecute {
	if p.Concurrency <= 0 {
		p.Concurrency = 4
	}
	if p.MaxPlanSteps <= 0 {
		p.MaxPlanSteps = 20
	}
	if p.MaxReplans <= 0 {
		p.MaxReplans = 2
	}
	if p.MaxPlanRetries <= 0 {
		p.MaxPlanRetries = 2
	}
	if p.MaxDepth <= 0 {
		p.MaxDepth = 2
	}
	if p.MaxTotalSteps <= 0 {
		p.MaxTotalSteps = 2 * p.MaxPlanSteps
	}
	return p
}

func (p PlanExecute) begin(task messages.TaskSubmitted) taskRun {
	return &planRun{cfg: p.withDefaults(), task: task, purpose: PurposePlan, calls: map[string]int{}}
}

// planStage is where a plan_execute task stands.
type planStage int

const (
	stagePlanning planStage = iota // the planner is (to be) asked for a plan
	stageRunning                   // the plan's steps run
	stageAnswer                    // the answer is (to be) asked for
	stageDone                      // the answer came, or the task must fail
)

// stepState is where a step of the plan stands.
type stepState int

const (
	stepWaiting stepState = iota
	stepRunning
	stepDone
	stepFailed
)

// stepRun is a step of the current plan and how it ran.
type stepRun struct {
	planStep
	state stepState
	// key is the effect key of its call (a tool or delegate step).
	key string
	// result is its result; problem why it failed, or how it contradicts the plan.
	result, problem string
	// eventID is the ID of the event that finished it.
	eventID string
	// height is the number of steps on the longest chain of steps that wait for it,
	// itself included: of the ready steps, the highest runs first.
	height int
}

// planRun is the plan_execute state of one task.
type planRun struct {
	cfg   PlanExecute
	task  messages.TaskSubmitted
	stage planStage
	// purpose is the next planning call's (plan or replan); cause the event it (or
	// the answer call) follows from.
	purpose, cause string
	// asking and askKey are the purpose and key of the paradigm's model call in flight.
	asking, askKey string
	// prev is the planner's latest answer that was not taken, and problem why.
	prev, problem string
	attempts      int // answers not taken in this planning round
	replans       int
	total         int // steps accepted, over every plan of the task
	steps         []*stepRun
	answerHint    string
	// failed is the step whose failure calls for a re-plan.
	failed *stepRun
	// loopStep is the step the agent's tool loop works on ("" for none).
	loopStep string
	// calls counts the calls made for each step ID, over every plan.
	calls map[string]int
	// The task's end: its output, or its failure (reason set).
	output, reason, errMsg, endCause string
}

// fold implements taskRun.
func (r *planRun) fold(f fold, e messages.Envelope, p messages.Payload) {
	switch p := p.(type) {
	case *messages.ModelRequested:
		// Only the paradigm's own calls are the planner's: a goal step's loop makes
		// its agent's compression calls (a digest, a summary) too, which older rules
		// read as plans.
		if p.Purpose != "" && (f.t.rules < rulesPlanOwnCalls || planPurpose(p.Purpose)) {
			r.asking, r.askKey = p.Purpose, p.Key
		}
	case *messages.ModelResponded:
		switch {
		case r.asking != "" && p.Key == r.askKey:
			purpose := r.asking
			r.asking, r.askKey = "", ""
			r.onAnswer(f, e, purpose, p)
		case r.loopStep != "" && f.t.phase == phaseGotReply && f.t.replyID == e.ID:
			if s := r.step(r.loopStep); s != nil && (p.Error != "" || len(p.Message.ToolCalls) == 0) {
				r.loopStep = ""
				errMsg := p.Error
				if why := unwholeWork(f.t.rules, p); why != "" && errMsg == "" {
					// A cut answer is no result: the step failed, and is re-planned.
					errMsg = "its answer was not whole: " + why + ": " + textclip.Head(p.Message.Content, 300)
				} else if errMsg == "" && f.t.rules >= rulesPlanEmpty && strings.TrimSpace(p.Message.Content) == "" {
					// Nor is an empty one (rules 15; older rules took the white space).
					errMsg = "its answer was empty: no text and no tool calls"
				}
				r.finish(s, e.ID, p.Message.Content, errMsg)
			}
		}
	case *messages.ToolCallRequested:
		if p.Purpose == PurposeStep {
			id, _, _ := strings.Cut(p.CallID, "#")
			if s := r.step(id); s != nil && s.state == stepWaiting {
				s.state, s.key = stepRunning, p.Key
				r.calls[id]++
			}
		}
	case *messages.ToolCallCompleted:
		for _, s := range r.steps {
			if s.state == stepRunning && s.key != "" && s.key == p.Key {
				r.finish(s, e.ID, p.Result, p.Error)
				break
			}
		}
	}
	r.settle(f, e.ID)
}

// planPurpose reports whether a model call of purpose is one of the paradigm's own:
// a plan, a re-plan or the answer.
func planPurpose(purpose string) bool {
	return purpose == PurposePlan || purpose == PurposeReplan || purpose == PurposeAnswer
}

// onAnswer folds the answer of a planning or answer call.
func (r *planRun) onAnswer(f fold, e messages.Envelope, purpose string, p *messages.ModelResponded) {
	if p.Error != "" {
		r.end("", messages.ReasonModelError, p.Error, e.ID)
		return
	}
	if purpose == PurposeAnswer {
		if f.t.rules >= rulesWhole {
			if tf := unwholeFailure(f.t.rules, p); tf != nil { // the task's final answer, cut or withheld
				r.end("", tf.Reason, tf.Error, e.ID)
				return
			}
		}
		if f.t.rules >= rulesPlanEmpty && strings.TrimSpace(p.Message.Content) == "" {
			// As the loop's empty final answer (rules 15; older rules completed with it).
			msg := emptyAnswerError(p.Message.Content)
			if n := len(p.Message.ToolCalls); n > 0 {
				// The answer call offers no tools: calls are no answer.
				msg = fmt.Sprintf("the model's answer to the plan's answer call is empty: no text, and %d tool calls, which that call does not take; "+
					"the task has no answer (the reply is in the session's model.responded event)", n)
			}
			r.end("", messages.ReasonEmptyAnswer, msg, e.ID)
			return
		}
		r.end(p.Message.Content, "", "", e.ID)
		return
	}
	a, _ := f.s.agents.For(f.t.Spec.Agent)
	lim := planLimits{maxSteps: r.cfg.MaxPlanSteps, maxDepth: r.cfg.MaxDepth, maxNew: r.cfg.MaxTotalSteps - r.total,
		hasTool: a.hasTool, agents: r.delegates(), delegate: a.hasTool(DelegateTool),
		approval: func(tool, args string) bool {
			return a.callNeedsApproval(f.t.rules, messages.ToolCallRequested{Tool: tool, Arguments: args})
		},
		chain: func(tool, args string) bool {
			return a.isChainCall(messages.ToolCallRequested{Tool: tool, Arguments: args})
		}}
	for _, s := range r.steps {
		if s.state == stepDone {
			lim.kept = append(lim.kept, s.planStep)
		}
	}
	pl, err := parsePlan(f.t.rules, p.Message.Content, lim)
	if why := unwholeWork(f.t.rules, p); why != "" {
		err = errors.New(why)
	} else if f.t.rules >= rulesWhole && strings.TrimSpace(p.Message.Content) == "" {
		err = errors.New("the answer is empty") // not the decoder's bare "EOF"
	}
	if err != nil {
		r.attempts++
		r.prev, r.problem, r.cause = p.Message.Content, err.Error(), e.ID
		if r.attempts > r.cfg.MaxPlanRetries {
			why := err.Error()
			if f.t.rules >= rulesPlanPrompts {
				why = clipMiddle(why, planProblemBytes) // as the retries quoted it
			}
			r.end("", messages.ReasonPlanFailed, fmt.Sprintf("the planner gave no valid plan in %d answers; the last one: %s", r.attempts, why), e.ID)
		}
		return
	}
	// Take the plan: the finished steps stay as they ran.
	done := make(map[string]*stepRun, len(r.steps))
	for _, s := range r.steps {
		if s.state == stepDone {
			done[s.ID] = s
		}
	}
	steps := make([]*stepRun, len(pl.Steps))
	for i, ps := range pl.Steps {
		if s, ok := done[ps.ID]; ok {
			steps[i] = s
			continue
		}
		steps[i] = &stepRun{planStep: ps}
		r.total++
	}
	setHeights(steps)
	r.steps, r.stage, r.cause = steps, stageRunning, e.ID
	r.prev, r.problem, r.attempts, r.failed = "", "", 0, nil
	if pl.Answer != "" || purpose == PurposePlan {
		r.answerHint = pl.Answer
	}
}

// finish records a step's outcome; a failure, or a result without what the plan
// expected, calls for a re-plan.
func (r *planRun) finish(s *stepRun, eventID, result, errMsg string) {
	s.eventID = eventID
	switch {
	case errMsg != "":
		s.state, s.problem = stepFailed, errMsg
	case s.Expect != "" && !strings.Contains(result, s.Expect):
		s.state, s.result = stepFailed, result
		s.problem = fmt.Sprintf("its result does not contain %q, which the plan expected: %s", s.Expect, textclip.Head(result, 300))
	default:
		s.state, s.result = stepDone, result
		return
	}
	if r.failed != nil {
		return // the re-plan sees every failure
	}
	r.failed = s
	if r.replans >= r.cfg.MaxReplans {
		r.end("", messages.ReasonPlanFailed, fmt.Sprintf("step %s failed: %s; no re-plan is left (%d made)", s.ID, textclip.Head(s.problem, 500), r.replans), eventID)
	}
}

// settle moves the run on after an event: to a re-plan once the steps in flight
// after a failure finished, to the answer once every step finished, and it starts
// the next step of the agent's loop.
func (r *planRun) settle(f fold, eventID string) {
	if r.stage != stageRunning {
		return
	}
	if r.running() > 0 {
		if r.failed == nil {
			r.startLoopStep(f)
		}
		return
	}
	switch {
	case r.failed != nil:
		r.stage, r.purpose, r.cause = stagePlanning, PurposeReplan, r.failed.eventID
		r.replans++
	case !slices.ContainsFunc(r.steps, func(s *stepRun) bool { return s.state != stepDone }):
		r.stage, r.cause = stageAnswer, eventID
	default:
		r.startLoopStep(f)
	}
}

// startLoopStep hands the agent's tool loop the next ready step that has only a
// goal, when there is no executor to delegate it to and the loop is free.
func (r *planRun) startLoopStep(f fold) {
	if r.cfg.Executor != "" || r.loopStep != "" || r.running() >= r.cfg.Concurrency {
		return
	}
	for _, s := range r.steps {
		if s.state == stepWaiting && s.Tool == "" && s.Agent == "" && r.ready(s) {
			s.state, s.key = stepRunning, ""
			r.loopStep = s.ID
			r.calls[s.ID]++
			f.resume(messages.ChatMessage{Role: messages.RoleUser, Content: fmt.Sprintf("Step %s of your plan: %s%s\n\nAnswer with the step's result.",
				s.ID, s.Goal, r.depResults(s))})
			return
		}
	}
}

func (r *planRun) end(output, reason, errMsg, cause string) {
	r.stage, r.output, r.reason, r.errMsg, r.endCause = stageDone, output, reason, errMsg, cause
}

// decide implements taskRun.
func (r *planRun) decide(v *view) *Decision {
	switch r.stage {
	case stageDone:
		if r.reason != "" {
			return v.fail(r.reason, r.errMsg, r.endCause)
		}
		return v.complete(r.output, r.endCause)
	case stagePlanning:
		return v.model(r.purpose, r.cause)
	case stageAnswer:
		return v.model(PurposeAnswer, r.cause)
	}
	if r.loopStep != "" {
		if d := v.loop(); d != nil {
			return d
		}
	}
	return r.nextStep(v)
}

// decideBeside implements besideModel: while a goal step's loop waits for the
// model, the tool and delegate steps that are ready start (from rules 6; under
// older rules they waited for its answer).
func (r *planRun) decideBeside(v *view) *Decision {
	if r.stage != stageRunning {
		return nil
	}
	return r.nextStep(v)
}

// nextStep returns the call of the next ready tool or delegate step, within the
// plan's concurrency, or nil.
func (r *planRun) nextStep(v *view) *Decision {
	if r.failed != nil || r.running() >= r.cfg.Concurrency {
		return nil
	}
	// The ready step on the longest chain first (the plan's order among equals), so
	// that a bound below the plan's width does not leave a long branch for last.
	var next *stepRun
	for _, s := range r.steps {
		if s.state != stepWaiting || !r.ready(s) || (s.Tool == "" && s.Agent == "" && r.cfg.Executor == "") {
			continue
		}
		if next == nil || s.height > next.height {
			next = s
		}
	}
	if s := next; s != nil {
		callID := s.ID
		if n := r.calls[s.ID]; n > 0 {
			callID = fmt.Sprintf("%s#%d", s.ID, n+1)
		}
		switch {
		case s.Tool != "":
			args := string(s.Args) // compact JSON, checked as an object when the plan was taken
			if strings.Contains(args, "{{") {
				if rendered, err := renderArgs(s.Args, r.resultOf); err == nil {
					args = rendered
				}
			}
			return v.call(PurposeStep, callID, s.Tool, args, r.cause)
		case s.Agent != "" || r.cfg.Executor != "":
			agent := cmp.Or(s.Agent, r.cfg.Executor)
			return v.call(PurposeStep, callID, DelegateTool, stepDelegation(v.t.rules, agent, r.delegation(s)), r.cause)
		}
	}
	return nil
}

// setHeights sets each step's height: 1, plus the greatest height of the steps that
// depend on it.
func setHeights(steps []*stepRun) {
	var height func(s *stepRun) int
	height = func(s *stepRun) int {
		if s.height == 0 {
			s.height = 1
			for _, o := range steps {
				if slices.Contains(o.Deps, s.ID) {
					s.height = max(s.height, 1+height(o))
				}
			}
		}
		return s.height
	}
	for _, s := range steps {
		s.height = 0
	}
	for _, s := range steps {
		height(s)
	}
}

// step returns the current plan's step id, or nil.
func (r *planRun) step(id string) *stepRun {
	for _, s := range r.steps {
		if s.ID == id {
			return s
		}
	}
	return nil
}

func (r *planRun) running() int {
	n := 0
	for _, s := range r.steps {
		if s.state == stepRunning {
			n++
		}
	}
	return n
}

// ready reports whether every dependency of s finished.
func (r *planRun) ready(s *stepRun) bool {
	for _, d := range s.Deps {
		if ds := r.step(d); ds == nil || ds.state != stepDone {
			return false
		}
	}
	return true
}

// resultOf returns the result of step id, or of its parts (id.1, id.2, …) one per
// line, for an args' {{id}}.
func (r *planRun) resultOf(id string) string {
	if s := r.step(id); s != nil {
		return s.result
	}
	var parts []string
	for _, s := range r.steps {
		if strings.HasPrefix(s.ID, id+".") {
			parts = append(parts, s.result)
		}
	}
	return strings.Join(parts, "\n")
}

// depResults renders the results of s's dependencies, for a step's instruction.
func (r *planRun) depResults(s *stepRun) string {
	if len(s.Deps) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n\nResults of the steps it builds on:")
	for _, d := range s.Deps {
		ds := r.step(d)
		fmt.Fprintf(&b, "\n[%s] %s\n%s", d, ds.Goal, ds.result)
	}
	return b.String()
}

// stepDelegation returns the arguments of the delegate call that gives agent a
// step's task. From decision rules 14 (rulesStepWithin) they are at most
// MaxHandOverArguments long, the delegate tool's bound: past it, the task is cut
// in its middle (its goal at its head, the plan's task at its tail, a note
// between: cutMiddleWithin). Under older rules it was given whole, and a task
// of 250 KiB of "<" (6 bytes each as JSON) made every delegated step's call
// 1.5 MiB, which the delegate tool refused: the step failed on arguments no one
// wrote, and so did the plan.
func stepDelegation(rules int, agent, task string) string {
	args, _ := json.Marshal(map[string]string{"agent": agent, "task": task})
	if rules < rulesStepWithin || len(args) <= MaxHandOverArguments {
		return string(args)
	}
	empty, _ := json.Marshal(map[string]string{"agent": agent, "task": ""})
	task = cutMiddleWithin(task, MaxHandOverArguments-len(empty), "the step's task")
	args, _ = json.Marshal(map[string]string{"agent": agent, "task": task})
	return string(args)
}

// delegation is the task a delegated step gives its agent.
func (r *planRun) delegation(s *stepRun) string {
	return fmt.Sprintf("%s%s\n\n(This is step %s of a plan for the task: %s)", s.Goal, r.depResults(s), s.ID, r.task.Input)
}

// delegates returns the agents a step may name, sorted.
func (r *planRun) delegates() []string {
	out := make([]string, 0, len(r.cfg.Agents))
	for name := range r.cfg.Agents {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// prompt implements taskRun.
func (r *planRun) prompt(v *view, purpose string) llm.Request {
	task := messages.ChatMessage{Role: messages.RoleUser, Content: "Task: " + r.task.Input}
	if purpose == PurposeAnswer {
		var b strings.Builder
		fmt.Fprintf(&b, "Task: %s\n\n<%s>", r.task.Input, llm.StepResultsTag)
		for _, s := range r.steps {
			fmt.Fprintf(&b, "\n[%s] %s\n%s", s.ID, stepTitle(s.planStep), s.result)
		}
		fmt.Fprintf(&b, "\n</%s>", llm.StepResultsTag)
		if r.answerHint != "" {
			b.WriteString("\n\nHow to answer: " + r.answerHint)
		}
		return llm.Request{Messages: []messages.ChatMessage{
			v.systemMessage("Your plan for the task below has run. Write the task's answer from the steps' results: answer the task itself, concisely, without describing the plan."),
			{Role: messages.RoleUser, Content: b.String()},
		}}
	}
	msgs := []messages.ChatMessage{v.systemMessage(r.planSection(v.a)), task}
	if purpose == PurposeReplan {
		msgs = append(msgs, messages.ChatMessage{Role: messages.RoleUser, Content: r.replanBrief(v.t.rules)})
	}
	if r.prev != "" {
		prev, problem := r.prev, r.problem
		if v.t.rules >= rulesPlanPrompts {
			// A refused answer may be huge (a plan of ten thousand steps): its head
			// and tail say what it was.
			prev, problem = clipMiddle(prev, planQuoteBytes), clipMiddle(problem, planProblemBytes)
		}
		msgs = append(msgs, messages.ChatMessage{Role: messages.RoleAssistant, Content: prev},
			messages.ChatMessage{Role: messages.RoleUser, Content: "That answer is not a valid plan: " + problem + ". Answer again with the plan's JSON object only."})
	}
	return llm.Request{Messages: msgs}
}

// What a planner's retry quotes, at most, of the answer refused and of why it was
// (rulesPlanPrompts).
const (
	planQuoteBytes   = 4096
	planProblemBytes = 1024
)

// clipMiddle returns s when it has at most n bytes, else its head (two thirds of
// n) and its tail (the rest), cut between characters, with a marker of the bytes
// left out between them.
func clipMiddle(s string, n int) string { return textclip.Middle(s, n*2/3, n-n*2/3, "") }

// stepTitle is what a step does, in a line.
func stepTitle(s planStep) string {
	switch {
	case s.Goal != "":
		return s.Goal
	case s.Tool != "":
		return s.Tool + " " + string(s.Args)
	}
	return ""
}

// planSection is the system prompt's part that asks for a plan.
func (r *planRun) planSection(a Agent) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<%s>\n", llm.PlanRequestTag)
	b.WriteString("Plan the user's task as steps, then answer with the plan: one JSON object and nothing else, of this shape:\n")
	b.WriteString(`{"steps": [{"id": "s1", "goal": "what the step finds", "tool": "TOOL", "args": {…}, "deps": []}, {"id": "s2", "goal": "…", "deps": ["s1"]}], "answer": "how to write the answer from the steps' results"}` + "\n")
	fmt.Fprintf(&b, "A step has an ID (a letter, then letters, digits, '_' or '-'), a goal and deps, the IDs of the steps whose results it needs; steps that do not depend on each other run in parallel. ")
	b.WriteString("A step either calls a tool with its args (a string in args may quote the result of a step among its deps as {{ID}}), ")
	if len(r.cfg.Agents) > 0 {
		b.WriteString("or names an agent (\"agent\": NAME) that works its goal, ")
	}
	b.WriteString("or has only a goal, which is worked out with the tools. A step may say what its result must contain (\"expect\"); a step that fails or lacks it is re-planned. ")
	fmt.Fprintf(&b, "At most %d steps.\n\nTools a step may call:", r.cfg.MaxPlanSteps)
	for _, t := range a.ToolSpecs() {
		params := "{}"
		if len(t.Parameters) > 0 {
			params = string(t.Parameters)
		}
		fmt.Fprintf(&b, "\n- %s: %s Arguments: %s", t.Name, strings.TrimSpace(t.Description), params)
	}
	if len(r.cfg.Agents) > 0 {
		b.WriteString("\n\nAgents a step may name:")
		for _, name := range r.delegates() {
			fmt.Fprintf(&b, "\n- %s: %s", name, r.cfg.Agents[name])
		}
	}
	fmt.Fprintf(&b, "\n</%s>", llm.PlanRequestTag)
	return b.String()
}

// replanBrief tells the planner how its plan ran and what failed, under decision
// rules version rules.
func (r *planRun) replanBrief(rules int) string {
	var b strings.Builder
	cur := plan{Answer: r.answerHint}
	for _, s := range r.steps {
		ps := s.planStep
		if ps.Deps == nil && rules >= rulesPlanPrompts {
			ps.Deps = []string{} // "deps":[], as the planner was asked to write it, not null
		}
		cur.Steps = append(cur.Steps, ps)
	}
	pj, _ := json.Marshal(cur)
	fmt.Fprintf(&b, "Your plan so far:\n%s\n\nHow its steps ran:", pj)
	var kept []string
	for _, s := range r.steps {
		switch s.state {
		case stepDone:
			fmt.Fprintf(&b, "\n[%s] finished: %s", s.ID, textclip.Head(s.result, 500))
			kept = append(kept, s.ID)
		case stepFailed:
			fmt.Fprintf(&b, "\n[%s] FAILED: %s", s.ID, textclip.Head(s.problem, 500))
		default:
			fmt.Fprintf(&b, "\n[%s] not run", s.ID)
		}
	}
	b.WriteString("\n\nWrite a new plan for the rest of the task. ")
	if len(kept) > 0 {
		fmt.Fprintf(&b, "The finished steps (%s) stay as they ran: keep their IDs, and depend on them as before. ", strings.Join(kept, ", "))
	}
	fmt.Fprintf(&b, "Replace the failed step and the steps not run; you may split a failed step s3 into parts s3.1, s3.2, … (a step depending on s3 then waits for all its parts), at most %d levels deep.", r.cfg.MaxDepth)
	return b.String()
}
