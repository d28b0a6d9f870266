package actors

import (
	"cmp"
	"errors"
	"fmt"
	"strings"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// Reflection is the paradigm that has each answer critiqued before it is given:
// the agent's loop (tools and all) writes a draft; a critic — the agent's model or
// one of its own (CriticModels), with a prompt of its own (CriticPrompt) — judges it against the task with a verdict
// (verdict.go); on "revise" the issues and suggestions go back into the
// conversation and the loop revises its answer, tools still at hand; on "pass" the
// draft is the task's answer.
//
// Its model calls with a purpose are "critique". A task ends:
//
//   - completed with the draft the critic passed;
//   - completed with the latest draft when MaxRounds critiques did not pass it (a
//     user asked a question: the best answer there is beats none), its note
//     (messages.TaskCompleted.Note) saying so with the critic's last issues;
//   - completed with the draft when the critic's verdict cannot be read twice in a
//     row (the answer is asked for again once, with what was wrong), its note
//     saying the answer was not judged;
//   - completed with a draft written at the task's last model call, which cannot
//     be critiqued (max steps bounds the critic's calls too), its note saying so,
//     and with the draft whose verdict could not be read at the last model call
//     (rules 15), its note saying it was not judged; so too, from rules 15, when
//     the task's token or cost budget is spent (a draft whose tokens reach it is
//     kept, as a final answer is);
//   - completed with the latest draft when the max steps cut a revision short, or
//     from rules 15 its budget, its note saying the critic did not pass it;
//   - failed as the loop fails (max steps, a model error), or with reason
//     model_error when the critic's model call fails.
type Reflection struct {
	// MaxRounds bounds the critiques of a task: the first draft's and one per
	// revision (default 2: a draft, at most one revision).
	MaxRounds int
	// CriticPrompt is the critic's system prompt, its rubric; the verdict's format
	// is added to it. Empty: DefaultCriticPrompt.
	CriticPrompt string
	// CriticModels, when set, are the critic's own chain of models by name, its
	// model first (llm.Request.Models; the gateway must have the chain): the
	// critique goes there instead of to the agent's models, and its
	// ModelRequested records CriticModels[0]. Empty: the agent's models.
	CriticModels []string
}

// DefaultCriticPrompt is the critic's rubric when Reflection.CriticPrompt is empty.
const DefaultCriticPrompt = "You review an assistant's answer to a task before the user sees it. " +
	"Check that it answers the whole task, that what it states is correct and follows from the task, " +
	"and that it is clear. Ask for a revision only for a problem that matters, not for a matter of taste."

// Purposes of reflection's and reflexion's model and tool calls
// (messages.ModelRequested.Purpose, messages.ToolCallRequested.Purpose).
const (
	PurposeCritique    = "critique"
	PurposeEvaluate    = "evaluate"
	PurposeLesson      = "lesson"
	PurposeLessons     = "lessons"
	PurposeStoreLesson = "store_lesson"
)

// Name implements Paradigm.
func (Reflection) Name() string { return "reflection" }

func (p Reflection) maxRounds() int {
	if p.MaxRounds > 0 {
		return p.MaxRounds
	}
	return 2
}

func (p Reflection) begin(messages.TaskSubmitted) taskRun { return &reflectionRun{cfg: p} }

// reflectionRun is reflection's state of one task.
type reflectionRun struct {
	cfg Reflection
	// round counts the drafts critiqued (a retried verdict aside).
	round int
	// draftID is the reply event of the draft critiqued last, draft its text; key
	// the key of its critique in flight ("" when none).
	draftID, draft, key string
	// verdictID is the event of the critic's latest answer.
	verdictID string
	// retry: the draft's verdict could not be read, and is asked for once more;
	// retried: it was. bad is that answer and badErr what was wrong with it.
	retry, retried bool
	bad, badErr    string
	// issues are the critic's latest issues.
	issues []issue
	// end is the note of the task's completion once the critique settled it
	// ("": not settled); modelErr the critic's model error.
	end, modelErr string
}

func (r *reflectionRun) fold(f fold, e messages.Envelope, p messages.Payload) {
	switch p := p.(type) {
	case *messages.ModelRequested:
		if p.Purpose != PurposeCritique {
			return
		}
		r.key = p.Key
		if f.t.replyID == r.draftID && r.retry {
			r.retry = false // the same draft, its verdict asked again
			return
		}
		r.round++
		r.draftID, r.draft, r.retried, r.bad, r.badErr = f.t.replyID, f.t.reply.Message.Content, false, "", ""
	case *messages.ModelResponded:
		if r.key == "" || p.Key != r.key {
			return
		}
		r.key, r.verdictID = "", e.ID
		if p.Error != "" {
			r.modelErr = p.Error
			return
		}
		v, err := parseVerdict(f.t.rules, p.Message.Content)
		if why := unwholeWork(f.t.rules, p); why != "" {
			err = errors.New(why)
		}
		switch {
		case err != nil && !r.retried:
			r.retry, r.retried, r.bad, r.badErr = true, true, p.Message.Content, err.Error()
		case err != nil:
			r.end = fmt.Sprintf("reflection: the critic's verdict could not be read twice (%s): the answer was not judged", err)
		case v.Verdict == VerdictPass:
			r.end = fmt.Sprintf("reflection: the critic passed the answer in round %d of %d", r.round, r.cfg.maxRounds())
		case r.round >= r.cfg.maxRounds():
			r.issues = v.Issues
			r.end = fmt.Sprintf("reflection: the critique did not pass in %d rounds; the answer is the latest revision. The critic's last issues:\n%s",
				r.round, issuesList(f.t.rules, v.Issues))
		default:
			r.issues = v.Issues
			f.resume(messages.ChatMessage{Role: messages.RoleUser, Content: "A reviewer found problems with your answer:\n" + issuesList(f.t.rules, v.Issues) +
				"\n\nRevise your answer to the task, fixing each problem (use the tools if you need to), and reply with the complete revised answer."})
		}
	}
}

func (r *reflectionRun) decide(v *view) *Decision {
	if r.modelErr != "" {
		return v.fail(messages.ReasonModelError, "the critic: "+r.modelErr, r.verdictID)
	}
	out, replyID, ok := v.loopAnswer()
	if !ok {
		d := v.loop()
		if f, failed := payloadOf[*messages.TaskFailed](d); failed && f.Reason == messages.ReasonMaxSteps && r.draftID != "" {
			// A revision the max steps cut short: the draft there is beats no answer.
			return completeNoted(v, r.draft, fmt.Sprintf("reflection: the revision did not end within the task's %d model calls; "+
				"the answer is the draft of round %d, which the critic did not pass", v.a.maxSteps(v.t), r.round), d.CausationID)
		} else if failed && r.draftID != "" && v.t.rules >= rulesDraftPastBudget && budgetReason(f.Reason) {
			// So does one its budget cut short (rules 15; older rules failed the task).
			return completeNoted(v, r.draft, fmt.Sprintf("reflection: the revision stopped at the task's %s; "+
				"the answer is the draft of round %d, which the critic did not pass", budgetName(f.Reason), r.round), d.CausationID)
		}
		return d
	}
	if replyID == r.draftID {
		switch {
		case r.end != "":
			return completeNoted(v, out, r.end, r.verdictID)
		case r.retry:
			if max := v.a.maxSteps(v.t); v.t.rules >= rulesRetryAtLimit && v.t.Steps >= max {
				// No model call is left to ask the verdict again: the draft there is
				// beats no answer (rules 15; older rules failed the task with max_steps).
				return completeNoted(v, out, fmt.Sprintf("reflection: the critic's verdict could not be read (%s), and the task used its %d model calls: "+
					"the answer was not judged", r.badErr, max), r.verdictID)
			}
			if f := v.a.overBudget(v.t); f != nil && v.t.rules >= rulesDraftPastBudget {
				// Nor when its budget is spent (rules 15; older rules failed the task).
				return completeNoted(v, out, fmt.Sprintf("reflection: the critic's verdict could not be read (%s), and the task spent its %s: "+
					"the answer was not judged", r.badErr, budgetName(f.Reason)), r.verdictID)
			}
			return v.model(PurposeCritique, r.verdictID)
		}
		return nil // the critique is in flight
	}
	if max := v.a.maxSteps(v.t); v.t.Steps >= max {
		return completeNoted(v, out, fmt.Sprintf("reflection: the answer was not critiqued: the task used its %d model calls", max), replyID)
	}
	if f := v.a.overBudget(v.t); f != nil && v.t.rules >= rulesDraftPastBudget {
		// A draft whose tokens reached the budget is kept, as a final answer is
		// (rules 15; older rules failed the task with the budget's reason).
		return completeNoted(v, out, fmt.Sprintf("reflection: the answer was not critiqued: the task spent its %s", budgetName(f.Reason)), replyID)
	}
	return v.model(PurposeCritique, replyID)
}

// budgetReason reports whether a task failed with reason because it spent its
// token or cost budget.
func budgetReason(reason string) bool {
	return reason == messages.ReasonTokenBudget || reason == messages.ReasonCostBudget
}

// budgetName names the budget a task spent for a note: "token budget", "cost budget".
func budgetName(reason string) string { return strings.ReplaceAll(reason, "_", " ") }

// completeNoted is v.complete with a note on the answer.
func completeNoted(v *view, output, note, cause string) *Decision {
	d := v.complete(output, cause)
	d.Payload.(*messages.TaskCompleted).Note = note
	return d
}

// prompt builds the critique: the rubric and the verdict's format, the task, how
// the loop worked on it, and the draft; on a retry, the unreadable answer and what was wrong with it.
func (r *reflectionRun) prompt(v *view, purpose string) llm.Request {
	draft, replyID, _ := v.loopAnswer()
	user := "The task:\n" + v.task().Input
	// What led to the draft (tool calls and results, earlier drafts and reviews),
	// so that the critic can check the answer against what the tools returned.
	if conv := v.conversation(); len(conv) > 2 {
		user += "\n\nHow the assistant worked on it:\n" + transcript(conv[1:len(conv)-1])
	}
	msgs := []messages.ChatMessage{
		{Role: messages.RoleSystem, Content: cmp.Or(r.cfg.CriticPrompt, DefaultCriticPrompt) + "\n\n" + verdictFormat},
		{Role: messages.RoleUser, Content: user + "\n\nThe answer to review:\n" + draft},
	}
	if r.bad != "" && replyID == r.draftID {
		bad, badErr := r.bad, r.badErr
		if v.t.rules >= rulesVerdictQuote {
			// An unreadable verdict may be huge: its head and tail say what it was,
			// as a planner's refused answer is quoted.
			bad, badErr = clipMiddle(bad, planQuoteBytes), clipMiddle(badErr, planProblemBytes)
		}
		msgs = append(msgs,
			messages.ChatMessage{Role: messages.RoleAssistant, Content: bad},
			messages.ChatMessage{Role: messages.RoleUser, Content: "I cannot read that as a verdict: " + badErr + ". Answer with the JSON object only."})
	}
	return llm.Request{Messages: msgs, Models: r.cfg.CriticModels}
}

// payloadOf returns d's payload as a T, and whether it is one (false for nil).
func payloadOf[T messages.Payload](d *Decision) (T, bool) {
	var zero T
	if d == nil {
		return zero, false
	}
	p, ok := d.Payload.(T)
	return p, ok
}
