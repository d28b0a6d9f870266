package actors

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/troupe-run/troupe/internal/textclip"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// Reflexion is the paradigm that learns from its mistakes across tasks. At a
// task's start it searches its lessons — memories in Namespace, through the memory
// tool (package memory) — with the task's input, and puts those it finds in the
// system prompt of the loop's model calls. The loop then works the task. When it
// fails (max steps, a model error) or, with Evaluate, an evaluator judges its
// answer poor (a verdict as reflection's critic gives), the model writes a lesson —
// what went wrong, what to do instead — and the memory tool adds it to Namespace,
// under the call's idempotency key (a re-issued call writes once). The task then
// ends with its real outcome: a failed task still fails, a poorly judged answer is
// still the answer.
//
// Its calls with a purpose: "lessons" (the memory tool's search), "evaluate" and
// "lesson" (model calls) and "store_lesson" (the memory tool's add). The evaluation
// and the lesson come after the loop ended and do not count against its max steps
// (a task the max steps stopped gets its lesson), but they are steps of the task.
// A search or a store that fails, or a lesson or an evaluation that cannot be read,
// leaves the task as it is: the events say what happened.
type Reflexion struct {
	// Namespace is the memory namespace of the agent's lessons, which the memory
	// tool must allow (required).
	Namespace string
	// MemoryTool is the memory tool's name (default "memory"); Expanded says its
	// actions are tools of their own (<name>_search, <name>_add) rather than one
	// tool taking {"op", "args"}.
	MemoryTool string
	Expanded   bool
	// Lessons bounds the lessons put in a task's prompt (default 3).
	Lessons int
	// Evaluate has each completed answer judged (purpose "evaluate"), so that a
	// poor answer gets a lesson as a failure does; EvaluatorPrompt is the
	// evaluator's rubric, to which the verdict's format is added (empty:
	// DefaultEvaluatorPrompt).
	Evaluate        bool
	EvaluatorPrompt string
}

// DefaultEvaluatorPrompt is the evaluator's rubric.
const DefaultEvaluatorPrompt = "You judge an assistant's final answer to a task after the fact, to decide whether a lesson should be learnt from it. " +
	"Pass an answer that does what the task asked. Ask for a revision when it does not answer the task, is wrong, " +
	"or says it could not do it."

// lessonFormat is the lesson writer's system prompt.
const lessonFormat = "You write a lesson from a task that went wrong, for the next time a task like it comes: " +
	"what went wrong, and what to do instead, each in a sentence or two, concrete and general enough to apply to similar tasks. " +
	"Answer with one JSON object and nothing else (a ```json fence around it is fine):\n" +
	`{"what_went_wrong": "…", "do_instead": "…"}`

// Name implements Paradigm.
func (Reflexion) Name() string { return "reflexion" }

func (p Reflexion) begin(messages.TaskSubmitted) taskRun { return &reflexionRun{cfg: p} }

// tool returns the memory tool's name and arguments for an action.
func (p Reflexion) tool(op string, args any) (string, string) {
	name := cmp.Or(p.MemoryTool, "memory")
	if p.Expanded {
		b, _ := json.Marshal(args) // structs of strings and ints
		return name + "_" + op, string(b)
	}
	b, _ := json.Marshal(struct {
		Op   string `json:"op"`
		Args any    `json:"args"`
	}{op, args})
	return name, string(b)
}

// lesson is what the model writes after a task that went wrong.
type lesson struct {
	WhatWentWrong string `json:"what_went_wrong"`
	DoInstead     string `json:"do_instead"`
}

// reflexionRun is reflexion's state of one task.
type reflexionRun struct {
	cfg Reflexion
	// searchKey is the key of the lessons' search ("" until requested); lessons
	// what it found, searchErr why it found nothing.
	searchKey  string
	searched   bool
	lessons    []string
	searchErr  string
	evalKey    string
	evalID     string
	evaluated  bool
	poor       []issue // the evaluator's issues: the answer was judged poor
	evalErr    string  // the evaluation failed or could not be read
	lessonKey  string
	lessonID   string
	learnt     *lesson
	lessonErr  string
	storeKey   string
	stored     bool
	storeError string
	memoryID   string
	duplicate  bool // the memory already held the same lesson
}

// The memory tool's results reflexion reads.
type (
	foundLessons struct {
		Results []struct {
			Content string `json:"content"`
		} `json:"results"`
	}
	addedLesson struct {
		ID    string `json:"id"`
		Event string `json:"event"`
	}
)

func (r *reflexionRun) fold(f fold, e messages.Envelope, p messages.Payload) {
	switch p := p.(type) {
	case *messages.ToolCallRequested:
		switch p.Purpose {
		case PurposeLessons:
			r.searchKey = p.Key
		case PurposeStoreLesson:
			r.storeKey = p.Key
		}
	case *messages.ToolCallCompleted:
		switch {
		case r.searchKey != "" && p.Key == r.searchKey && !r.searched:
			r.searched = true
			var found foundLessons
			if p.Error != "" {
				r.searchErr = p.Error
			} else if err := json.Unmarshal([]byte(p.Result), &found); err != nil {
				r.searchErr = "its result is not the memory tool's search result: " + err.Error()
			}
			for _, m := range found.Results {
				if c := strings.TrimSpace(m.Content); c != "" && len(r.lessons) < r.maxLessons() {
					if f.t.rules >= rulesQuotedTags {
						c = quotedLesson(c, f.t.rules)
					}
					r.lessons = append(r.lessons, c)
				}
			}
		case r.storeKey != "" && p.Key == r.storeKey && !r.stored:
			r.stored = true
			var added addedLesson
			if p.Error != "" {
				r.storeError = p.Error
			} else if json.Unmarshal([]byte(p.Result), &added) == nil {
				r.memoryID, r.duplicate = added.ID, added.Event == "NONE"
			}
		}
	case *messages.ModelRequested:
		switch p.Purpose {
		case PurposeEvaluate:
			r.evalKey = p.Key
		case PurposeLesson:
			r.lessonKey = p.Key
		}
	case *messages.ModelResponded:
		switch {
		case r.evalKey != "" && p.Key == r.evalKey && !r.evaluated:
			r.evaluated, r.evalID = true, e.ID
			if p.Error != "" {
				r.evalErr = p.Error
				return
			}
			v, err := parseVerdict(f.t.rules, p.Message.Content)
			if why := unwholeWork(f.t.rules, p); why != "" {
				err = errors.New(why)
			}
			switch {
			case err != nil:
				r.evalErr = "its verdict could not be read: " + err.Error()
			case v.Verdict == VerdictRevise:
				r.poor = v.Issues
			}
		case r.lessonKey != "" && p.Key == r.lessonKey && r.lessonID == "":
			r.lessonID = e.ID
			if p.Error != "" {
				r.lessonErr = p.Error
				return
			}
			if why := unwholeWork(f.t.rules, p); why != "" {
				r.lessonErr = why
				return
			}
			var l lesson
			body := jsonBody(f.t.rules, p.Message.Content, "what_went_wrong")
			if err := json.Unmarshal([]byte(body), &l); err != nil || body == "" {
				r.lessonErr = "it is not a JSON object"
				return
			}
			l.WhatWentWrong, l.DoInstead = strings.TrimSpace(l.WhatWentWrong), strings.TrimSpace(l.DoInstead)
			if l.WhatWentWrong == "" || l.DoInstead == "" {
				r.lessonErr = `it lacks "what_went_wrong" or "do_instead"`
				return
			}
			r.learnt = &l
		}
	}
}

func (r *reflexionRun) maxLessons() int { return cmp.Or(max(r.cfg.Lessons, 0), 3) }

func (r *reflexionRun) decide(v *view) *Decision {
	if v.inFlight() > 0 {
		return nil
	}
	if r.searchKey == "" {
		tool, args := r.cfg.tool("search", struct {
			Namespace string `json:"namespace"`
			Query     string `json:"query"`
			Limit     int    `json:"limit"`
		}{r.cfg.Namespace, clip(v.task().Input, 2000), r.maxLessons()})
		return v.call(PurposeLessons, "lessons", tool, args, v.t.ID)
	}
	d := v.loop()
	if d == nil {
		return nil
	}
	switch d.Payload.(type) {
	case *messages.TaskCompleted:
		if !r.cfg.Evaluate {
			return r.end(d)
		}
		if r.evalKey == "" {
			return v.modelPastMax(PurposeEvaluate, d.CausationID)
		}
		if len(r.poor) == 0 {
			return r.end(d)
		}
	case *messages.TaskFailed:
	default:
		return d // the loop goes on
	}
	// The task went wrong: a lesson, stored, then its outcome.
	if r.lessonKey == "" {
		return v.modelPastMax(PurposeLesson, d.CausationID)
	}
	if r.learnt != nil && r.storeKey == "" {
		tool, args := r.cfg.tool("add", struct {
			Namespace string            `json:"namespace"`
			Tier      string            `json:"tier"`
			Content   string            `json:"content"`
			Metadata  map[string]string `json:"metadata"`
		}{r.cfg.Namespace, "semantic", lessonText(v.task().Input, *r.learnt),
			map[string]string{"kind": "lesson", "session": v.s.SessionID, "task": v.t.ID, "outcome": outcomeWord(d)}})
		return v.call(PurposeStoreLesson, "store_lesson", tool, args, r.lessonID)
	}
	return r.end(d)
}

// end returns the loop's outcome d, a completion noted with what reflexion did.
func (r *reflexionRun) end(d *Decision) *Decision {
	c, ok := d.Payload.(*messages.TaskCompleted)
	if !ok {
		return d
	}
	var notes []string
	if n := len(r.lessons); n > 0 {
		notes = append(notes, fmt.Sprintf("%d lesson(s) of earlier tasks in the prompt", n))
	}
	switch {
	case r.evalErr != "":
		notes = append(notes, "the evaluation failed: "+r.evalErr)
	case len(r.poor) > 0:
		notes = append(notes, "the evaluator judged the answer poor")
	case r.evaluated:
		notes = append(notes, "the evaluator passed the answer")
	}
	switch {
	case r.memoryID != "" && r.duplicate:
		notes = append(notes, "the same lesson was stored before, as "+r.memoryID)
	case r.memoryID != "":
		notes = append(notes, "lesson stored as "+r.memoryID)
	case r.storeError != "":
		notes = append(notes, "the lesson was not stored: "+r.storeError)
	case r.lessonErr != "":
		notes = append(notes, "no lesson: "+r.lessonErr)
	}
	if len(notes) == 0 {
		return d
	}
	cc := *c
	cc.Note = "reflexion: " + strings.Join(notes, "; ")
	return &Decision{Payload: &cc, CausationID: d.CausationID, TaskID: d.TaskID}
}

func outcomeWord(d *Decision) string {
	if f, ok := d.Payload.(*messages.TaskFailed); ok {
		return "failed: " + f.Reason
	}
	return "judged poor"
}

// lessonText is a lesson as it is stored: the task it came from (so that a search
// with a similar task finds it), what went wrong, what to do instead.
func lessonText(task string, l lesson) string {
	return "Task: " + clip(task, 300) + "\nWhat went wrong: " + l.WhatWentWrong + "\nDo instead: " + l.DoInstead
}

// clip shortens s, trimmed of white space, to at most n bytes, on a rune
// boundary, marking the cut.
func clip(s string, n int) string { return textclip.Head(strings.TrimSpace(s), n) }

// lessonsTag names the element of the system prompt that holds the lessons
// (section).
const lessonsTag = "lessons"

// quotedLesson is a lesson as section writes it from rules 19 (rulesQuotedTags): with
// "&lt;" for the "<" of a tag that names the lessons' element or the core memory's
// (pctx.QuoteTags). A lesson quotes the task it was learnt on, which a user wrote,
// and an agent's lessons are found by every user's later tasks: under 1 to 18 a
// task holding "</lessons>" put the text after it in the system prompt of others'
// tasks as the prompt's own. From rules 20 (rulesQuotedLookalikes) a tag written
// with lookalikes of its characters is quoted too (pctx.QuoteLookalikeTags).
func quotedLesson(lesson string, rules int) string {
	if rules >= rulesQuotedLookalikes {
		return pctx.QuoteLookalikeTags(lesson, lessonsTag, memory.CoreSectionTag)
	}
	return pctx.QuoteTags(lesson, lessonsTag, memory.CoreSectionTag)
}

// section puts the lessons found in the loop's system prompt.
func (r *reflexionRun) section() string {
	if len(r.lessons) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("<" + lessonsTag + ">\nLessons you wrote after earlier tasks like this one went wrong; apply those that fit this task:\n")
	for _, l := range r.lessons {
		b.WriteString("- ")
		b.WriteString(strings.ReplaceAll(l, "\n", "\n  "))
		b.WriteByte('\n')
	}
	b.WriteString("</" + lessonsTag + ">")
	return b.String()
}

// prompt builds the evaluation (the rubric, the task, the answer) and the lesson
// (the task, what happened, how it ended).
func (r *reflexionRun) prompt(v *view, purpose string) llm.Request {
	answer, failure := r.outcome(v)
	task := "The task:\n" + v.task().Input
	if purpose == PurposeEvaluate {
		return llm.Request{Messages: []messages.ChatMessage{
			{Role: messages.RoleSystem, Content: cmp.Or(r.cfg.EvaluatorPrompt, DefaultEvaluatorPrompt) + "\n\n" + verdictFormat},
			{Role: messages.RoleUser, Content: task + "\n\nThe answer:\n" + answer},
		}}
	}
	outcome := "It failed: " + failure
	if failure == "" {
		outcome = "It answered:\n" + answer + "\n\nAn evaluator judged the answer poor:\n" + issuesList(v.t.rules, r.poor)
	}
	return llm.Request{Messages: []messages.ChatMessage{
		{Role: messages.RoleSystem, Content: lessonFormat},
		{Role: messages.RoleUser, Content: task + "\n\nWhat happened:\n" + transcript(v.conversation()[1:]) + "\n\n" + outcome},
	}}
}

// outcome reads how the loop ended: its answer, or why it failed.
func (r *reflexionRun) outcome(v *view) (answer, failure string) {
	t := v.t
	if t.phase == phaseGotReply {
		if t.reply.Error != "" {
			return "", "the model call failed: " + t.reply.Error
		}
		if len(t.reply.Message.ToolCalls) == 0 {
			return t.reply.Message.Content, ""
		}
	}
	return "", fmt.Sprintf("it stopped after %d model calls without a final answer (max steps)", v.a.maxSteps(t))
}

// transcript writes the task's steps for the lesson's prompt: the model's words
// and calls and the tools' results, each clipped.
func transcript(msgs []messages.ChatMessage) string {
	if len(msgs) == 0 {
		return "(nothing)"
	}
	var b strings.Builder
	for _, m := range msgs {
		switch m.Role {
		case messages.RoleAssistant:
			if c := strings.TrimSpace(m.Content); c != "" {
				fmt.Fprintf(&b, "- assistant: %s\n", clip(c, 500))
			}
			for _, c := range m.ToolCalls {
				fmt.Fprintf(&b, "- called %s(%s)\n", c.Name, clip(c.Arguments, 300))
			}
		case messages.RoleTool:
			fmt.Fprintf(&b, "- %s returned: %s\n", m.Name, clip(m.Content, 500))
		case messages.RoleUser:
			fmt.Fprintf(&b, "- user: %s\n", clip(m.Content, 500))
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}
