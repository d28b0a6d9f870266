package actors

import (
	"fmt"
	"strings"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// A paradigm is how an agent works a task beyond its tool loop: plan and execute,
// reflect, reflexion, a team's pattern. Like the loop, it is a state machine folded
// from the task's events, so a task of any paradigm is durable, replayable with
// replay verify, forkable and resumable after a crash or a hand-over.
//
// A paradigm works with three kinds of move, all recorded events:
//
//   - a model call with a purpose (messages.ModelRequested.Purpose: "plan",
//     "critique", …), whose prompt the paradigm builds (taskRun.prompt) and whose
//     answer goes to the paradigm, not into the conversation;
//   - tool calls with a purpose (messages.ToolCallRequested.Purpose: a plan's step,
//     a delegation to a sub-agent, a lesson stored), any number in flight at once,
//     whose results go to the paradigm;
//   - the agent's own loop (view.loop): the conversation, the model's tool calls,
//     up to its final answer, which the paradigm may take as a draft instead of the
//     task's answer, and may send back to the model with more to do (fold.resume).
//
// One model call is in flight at a time, the loop's or a paradigm's; tool calls with
// a purpose run in parallel, bounded by the paradigm and by the session's
// MaxParallelTools. A paradigm whose run decides beside a model call (besideModel:
// plan_execute's steps, from rules 6) starts such calls while one is in flight too.
// Every move is decided from folded state only, so the same events give the same
// decisions.

// Paradigm is an agent's paradigm (Agent.Paradigm): nil for the tool loop alone.
// The paradigms are this package's (NewPlanExecute, …); the interface is sealed.
type Paradigm interface {
	// Name is the paradigm's name, as an agents file and ModelRequested say it.
	Name() string
	// begin returns the paradigm's state of a task that starts.
	begin(task messages.TaskSubmitted) taskRun
}

// taskRun is a paradigm's state of one task.
type taskRun interface {
	// fold applies one of the task's events, after the session's own fold did.
	fold(f fold, e messages.Envelope, p messages.Payload)
	// decide returns the task's next event, or nil to wait. It is called whenever
	// the task is active and no model call is in flight; it must be a pure function
	// of the folded state and the view.
	decide(v *view) *Decision
	// prompt builds the request of the model call with this purpose; its Models,
	// when set, name a chain of models of its own (else the agent's).
	prompt(v *view, purpose string) llm.Request
}

// besideModel is a taskRun that makes moves while a model call of its task is in
// flight (the loop's, or its own): plan_execute starts the steps that are ready
// while a goal step's loop waits for the model (rulesPlanBeside).
type besideModel interface {
	// decideBeside is decide while a model call is in flight: the task's next
	// event that is no model call, or nil to wait. It must be a pure function of
	// the folded state and the view.
	decideBeside(v *view) *Decision
}

// promptSectioner is a taskRun that adds a section to the system prompt of the
// loop's model calls (reflexion's lessons).
type promptSectioner interface {
	section() string
}

// fold is what a taskRun may change of the session's state while folding an event.
type fold struct {
	s *SessionState
	t *taskState
}

// resume sends the loop back to the model with these messages added to the
// conversation: a revision asked after a critique, a step's instruction.
func (f fold) resume(msgs ...messages.ChatMessage) {
	f.s.history = append(f.s.history, msgs...)
	f.t.phase = phaseNeedModel
	f.t.calls = nil
}

// history returns the session's conversation so far (do not modify it).
func (f fold) history() []messages.ChatMessage { return f.s.history }

// view is what a taskRun decides from: the folded session, the task, its agent,
// and the seq and time of the event it decides.
type view struct {
	s       *SessionState
	t       *taskState
	a       Agent
	nextSeq uint64
	nowUS   int64
}

// task returns the task's submission.
func (v *view) task() messages.TaskSubmitted { return *v.t.Spec }

// cause returns the ID of the task's latest event, the cause of a decision that
// follows from the state as a whole.
func (v *view) cause() string { return v.s.lastID }

// loop returns the decision of the agent's tool loop: its next model call or tool
// call, or its final answer or failure. A taskRun that lets the loop run returns it
// as it is; one that takes the final answer as a draft returns its own move instead.
func (v *view) loop() *Decision { return v.s.decideLoop(&v.a, v.t, v.nextSeq, v.nowUS) }

// loopAnswer returns the output of the loop's final answer, when the loop's latest
// model reply is one (no tool calls, no error) and nothing acted on it yet.
func (v *view) loopAnswer() (output, replyID string, ok bool) {
	t := v.t
	if t.phase != phaseGotReply || t.reply.Error != "" || len(t.reply.Message.ToolCalls) > 0 || unwholeAnswer(t) != nil {
		return "", "", false // an unfinished answer is no draft: the loop fails the task
	}
	return t.reply.Message.Content, t.replyID, true
}

// conversation returns the task's part of the session's conversation: its input
// and everything after it (do not modify it).
func (v *view) conversation() []messages.ChatMessage { return v.s.history[v.t.start:] }

// model returns the decision to call the model for purpose (its request is the
// taskRun's prompt), or the task's failure when it has used its model calls or its
// token budget (stops.go).
func (v *view) model(purpose, cause string) *Decision {
	if max := v.a.maxSteps(v.t); v.t.Steps >= max {
		return v.fail(messages.ReasonMaxSteps, maxStepsError(v.t.Steps, max), cause)
	}
	if f := v.a.overBudget(v.t); f != nil {
		return &Decision{Payload: f, CausationID: cause, TaskID: v.t.ID}
	}
	return v.modelPastMax(purpose, cause)
}

// modelPastMax is model without the bounds of the task's max steps and token
// budget, for a paradigm's own few calls once the loop has ended (reflexion's
// evaluation and lesson: a task the max steps stopped still gets its lesson). The
// paradigm bounds them, and decides whether a budget spent forbids them; each
// still counts as a step.
func (v *view) modelPastMax(purpose, cause string) *Decision {
	t := v.t
	req, report := v.s.paradigmContext(v.a, t, t.run.prompt(v, purpose))
	if f := overWindow(t.rules, t, report); f != nil {
		return &Decision{Payload: f, CausationID: cause, TaskID: t.ID}
	}
	req.Step = t.Steps + 1
	model := v.a.Model
	if len(req.Models) > 0 {
		model = req.Models[0] // a chain of the paradigm's own (a critic's model)
	}
	return &Decision{Payload: &messages.ModelRequested{
		Key: v.s.keyAt(v.nextSeq), Model: model, Step: t.Steps + 1, Messages: len(req.Messages),
		PromptHash: llm.PromptHash(req), Tools: specNames(req.Tools), Protocol: req.Protocol, Purpose: purpose,
		Context: report,
	}, CausationID: cause, TaskID: t.ID}
}

// call returns the decision to call a tool for purpose; callID names the call
// within the task (a plan step's ID, …) and must be unique in it.
func (v *view) call(purpose, callID, tool, arguments, cause string) *Decision {
	return &Decision{Payload: &messages.ToolCallRequested{
		Key: v.s.keyAt(v.nextSeq), CallID: callID, Tool: tool, Arguments: arguments, Step: v.t.Steps, Purpose: purpose,
	}, CausationID: cause, TaskID: v.t.ID}
}

// complete returns the decision to end the task with this answer.
func (v *view) complete(output, cause string) *Decision {
	return &Decision{Payload: &messages.TaskCompleted{Output: output, Steps: v.t.Steps, Usage: v.t.Usage}, CausationID: cause, TaskID: v.t.ID}
}

// fail returns the decision to end the task without an answer.
func (v *view) fail(reason, msg, cause string) *Decision {
	return &Decision{Payload: &messages.TaskFailed{Reason: reason, Error: msg, Steps: v.t.Steps, Usage: v.t.Usage}, CausationID: cause, TaskID: v.t.ID}
}

// inFlight returns how many of the task's calls with a purpose have no result yet.
func (v *view) inFlight() int {
	n := 0
	for _, c := range v.t.aux {
		if !c.done {
			n++
		}
	}
	return n
}

// systemMessage returns the agent's system prompt, with the task's core memory, as
// the first message of a paradigm's prompt ("" parts left out).
func (v *view) systemMessage(extra ...string) messages.ChatMessage {
	parts := []string{v.a.SystemPrompt}
	if v.t.Spec.Memory != "" {
		parts = append(parts, coreMemorySection(v.t.Spec.Memory))
	}
	parts = append(parts, extra...)
	var b strings.Builder
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			if b.Len() > 0 {
				b.WriteString("\n\n")
			}
			b.WriteString(p)
		}
	}
	return messages.ChatMessage{Role: messages.RoleSystem, Content: b.String()}
}

// auxModel is a model call with a purpose, requested and not answered.
type auxModel struct {
	eventID string
	ts      int64 // the time of its request (Envelope.TS)
	key     messages.EffectKey
	req     messages.ModelRequested
}

// applyParadigm folds the events a paradigm's moves make, and hands every event of
// the active task to its run. It reports whether it took the event (the loop's
// fold must then leave it alone).
func (s *SessionState) applyParadigm(e messages.Envelope, p messages.Payload, key messages.EffectKey) (took bool) {
	t := s.active
	if t == nil || e.CorrelationID != t.ID {
		return false
	}
	switch p := p.(type) {
	case *messages.ModelRequested:
		if p.Purpose == "" {
			return false
		}
		t.pending = &auxModel{eventID: e.ID, ts: e.TS, key: key, req: *p}
		// As the loop's request (applyLoop): the state reads none of its report, and
		// a refold does not decode it (decodeFolded).
		t.pending.req.Context = nil
		t.Steps = p.Step
		took = true
	case *messages.ModelResponded:
		if t.pending == nil || p.Key != t.pending.req.Key {
			return false
		}
		t.pending = nil
		t.Usage = t.Usage.Add(p.Usage)
		took = true
	case *messages.ToolCallRequested:
		if p.Purpose == "" {
			return false
		}
		t.aux = append(t.aux, &callState{eventID: e.ID, ts: e.TS, keySeq: key.Seq, req: *p})
		took = true
	case *messages.ToolCallCompleted:
		for _, c := range t.aux {
			if c.req.Key == p.Key {
				if c.done {
					return true // a duplicate answer
				}
				c.done, c.result = true, *p
				took = true
			}
		}
		if !took {
			return false
		}
	}
	return took
}

// pendingModelText returns the key of the model call in flight as recorded on its
// request (ParseEffectKey takes only the text String makes).
func (s *SessionState) pendingModelText() string {
	t := s.active
	switch {
	case t == nil:
		return ""
	case t.pending != nil:
		return t.pending.req.Key
	}
	return t.model.Key
}

// foldRun hands an event of the active task to its paradigm's run.
func (s *SessionState) foldRun(e messages.Envelope, p messages.Payload) {
	if t := s.active; t != nil && t.run != nil && e.CorrelationID == t.ID {
		t.run.fold(fold{s: s, t: t}, e, p)
	}
}

// decideParadigm is DecideAmong for a task whose agent has a paradigm.
func (s *SessionState) decideParadigm(a Agent, t *taskState, nextSeq uint64, nowUS int64) *Decision {
	var beside besideModel
	if t.pending != nil || t.phase == phaseAwaitModel {
		// One model call at a time; from rules 6 a run may start tool calls beside it.
		var ok bool
		if beside, ok = t.run.(besideModel); !ok || t.rules < rulesPlanBeside {
			return nil
		}
	}
	// A call to a tool the agent does not have is answered here, without an effect.
	for _, c := range t.aux {
		if c.done {
			continue
		}
		if !a.hasTool(c.req.Tool) {
			return &Decision{Payload: &messages.ToolCallCompleted{Key: c.req.Key, CallID: c.req.CallID, Tool: c.req.Tool,
				Error: fmt.Sprintf("unknown tool %q; available tools: %s", c.req.Tool, strings.Join(a.toolNames(), ", "))}, CausationID: c.eventID, TaskID: t.ID}
		}
		// A chain runs step by step from the model's call of it, which this is not.
		if a.isChainCall(c.req) {
			return &Decision{Payload: &messages.ToolCallCompleted{Key: c.req.Key, CallID: c.req.CallID, Tool: c.req.Tool,
				Error: fmt.Sprintf("tool %q is a chain, which only the agent's loop can call", c.req.Tool)}, CausationID: c.eventID, TaskID: t.ID}
		}
	}
	if t.run == nil {
		return &Decision{Payload: &messages.TaskFailed{Reason: messages.ReasonUnknownAgent,
			Error: fmt.Sprintf("agent %q runs the %s paradigm, which this state was not set up for", a.Name, a.Paradigm.Name()),
			Steps: t.Steps, Usage: t.Usage}, CausationID: t.ID, TaskID: t.ID}
	}
	v := &view{s: s, t: t, a: a, nextSeq: nextSeq, nowUS: nowUS}
	if beside != nil {
		return beside.decideBeside(v)
	}
	return t.run.decide(v)
}
