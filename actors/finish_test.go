package actors_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// A final answer the model did not finish ends the task failed (rules 4): cut at
// the output limit, output_truncated; stopped by the content filter,
// content_filter. Its model.responded keeps the text and the finish reason,
// replay re-decides it, and the same events under rules 3 complete the task.
func TestUnfinishedAnswerFailsTheTask(t *testing.T) {
	for _, c := range []struct {
		finish, content, reason, says string
	}{
		{"length", "The answer is 14", messages.ReasonOutputTruncated, "cut after 16 characters"},
		{"max_tokens", "The ánswer", messages.ReasonOutputTruncated, "cut after 10 characters"},
		{"content_filter", "I can't help with that.", messages.ReasonContentFilter, `content filter stopped the model's answer (finish_reason "content_filter"): I can't help with that.`},
	} {
		t.Run(c.finish, func(t *testing.T) {
			h := newHarness(t, harnessOpts{model: script(t, llm.ScriptStep{Content: c.content, FinishReason: c.finish})})
			h.submit("s", "t", "What is 12 * 12?")
			events := h.wait("s")
			if task := decode[*messages.TaskSubmitted](t, events[0]); task.Rules != actors.ContextRules {
				t.Fatalf("the task was recorded under rules %d", task.Rules)
			}
			f := failure(t, events)
			if f.Reason != c.reason || !strings.Contains(f.Error, c.says) || f.Steps != 1 {
				t.Fatalf("failure %+v; want %s saying %q", f, c.reason, c.says)
			}
			var reply *messages.ModelResponded
			for _, e := range events {
				if e.Type == messages.TypeModelResponded {
					reply = decode[*messages.ModelResponded](t, e)
				}
			}
			if reply == nil || reply.Message.Content != c.content || reply.FinishReason != llm.AbnormalFinish(c.finish) {
				t.Fatalf("model.responded %+v; want the text and finish reason kept", reply)
			}
			agent := actors.Agent{Model: "scripted", SystemPrompt: "test"}
			verifyDeterministic(t, agent, events)

			// The same events recorded under rules 3 complete the task with the text.
			relabelled := append([]messages.Envelope(nil), events...)
			task := decode[*messages.TaskSubmitted](t, relabelled[0])
			task.Rules = 3
			enc, err := messages.NewEnvelope(task)
			if err != nil {
				t.Fatal(err)
			}
			relabelled[0].Payload = enc.Payload
			div, err := actors.Verify(agent, relabelled)
			if err != nil || div == nil || div.Seq != events[len(events)-1].Seq || !strings.Contains(div.Actual, "task.completed") {
				t.Fatalf("under rules 3 the task must complete where it failed (seq %d): %+v %v", events[len(events)-1].Seq, div, err)
			}
		})
	}
}

// A whole answer and a turn of tool calls cut at the limit go on as before: the
// call whose arguments were cut is answered with their error, and the model's
// next, whole answer completes the task.
func TestCutToolCallsGoOn(t *testing.T) {
	h := newHarness(t, harnessOpts{tools: []tools.Tool{tools.Calculator{}}, model: script(t,
		llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"12 *`}}, FinishReason: "length"},
		llm.ScriptStep{Content: "144", FinishReason: "stop"})})
	h.submit("s", "t", "What is 12 * 12?")
	events := h.wait("s")
	last := events[len(events)-1]
	if last.Type != messages.TypeTaskCompleted || decode[*messages.TaskCompleted](t, last).Output != "144" {
		t.Fatalf("the task ended %s: %s", last.Type, last.Payload)
	}
	if n := count(events, messages.TypeToolCallCompleted); n != 1 {
		t.Fatalf("%d tool results, want the cut call's error", n)
	}
}

// A paradigm that takes the loop's final answer as its draft does not take one cut
// at the output limit: reflection fails the task before any critique.
func TestReflectionDoesNotCritiqueACutAnswer(t *testing.T) {
	events, model, agent := reflecting(t, actors.Reflection{}, nil,
		llm.ScriptStep{Content: "It is 4", FinishReason: "length"}, text(pass))
	if f := failure(t, events); f.Reason != messages.ReasonOutputTruncated {
		t.Fatalf("failure %+v", f)
	}
	if got := purposes(t, events); got != "loop" || len(model.requests(actors.PurposeCritique)) != 0 {
		t.Fatalf("model calls: %s; want the loop's only", got)
	}
	verifyDeterministic(t, agent, events)
}

// A final answer with any other finish reason a provider gives is not whole
// either (rules 5): a provider's word for its content filter (Gemini's safety or
// recitation, in any case) fails the task with content_filter, any other word
// (malformed_function_call, language, other, one never seen) with
// answer_unfinished. Replay re-decides it; the same events under rules 4, whose
// builds recorded these words too, complete the task with the text.
func TestAnyUnfinishedReasonFailsTheTask(t *testing.T) {
	for _, c := range []struct {
		finish, content, reason, says string
	}{
		{"safety", "", messages.ReasonContentFilter, `content filter stopped the model's answer (finish_reason "safety")`},
		{"RECITATION", "Once upon a time", messages.ReasonContentFilter, `(finish_reason "RECITATION"): Once upon a time`},
		{"prohibited_content", "", messages.ReasonContentFilter, `finish_reason "prohibited_content"`},
		{"malformed_function_call", "", messages.ReasonAnswerUnfinished, `the provider ended the model's answer before it was finished (finish_reason "malformed_function_call")`},
		{"language", "Je", messages.ReasonAnswerUnfinished, `(finish_reason "language"): Je`},
		{"other", "", messages.ReasonAnswerUnfinished, `finish_reason "other"`},
		{"a_word_of_tomorrow", "partial", messages.ReasonAnswerUnfinished, `finish_reason "a_word_of_tomorrow"`},
	} {
		t.Run(c.finish, func(t *testing.T) {
			h := newHarness(t, harnessOpts{model: script(t, llm.ScriptStep{Content: c.content, FinishReason: c.finish})})
			h.submit("s", "t", "Tell me a story.")
			events := h.wait("s")
			if task := decode[*messages.TaskSubmitted](t, events[0]); task.Rules != actors.ContextRules {
				t.Fatalf("the task was recorded under rules %d", task.Rules)
			}
			f := failure(t, events)
			if f.Reason != c.reason || !strings.Contains(f.Error, c.says) || f.Steps != 1 {
				t.Fatalf("failure %+v; want %s saying %q", f, c.reason, c.says)
			}
			agent := actors.Agent{Model: "scripted", SystemPrompt: "test"}
			verifyDeterministic(t, agent, events)

			relabelled := append([]messages.Envelope(nil), events...)
			task := decode[*messages.TaskSubmitted](t, relabelled[0])
			task.Rules = 4
			enc, err := messages.NewEnvelope(task)
			if err != nil {
				t.Fatal(err)
			}
			relabelled[0].Payload = enc.Payload
			div, err := actors.Verify(agent, relabelled)
			if err != nil || div == nil || div.Seq != events[len(events)-1].Seq || !strings.Contains(div.Actual, "task.completed") {
				t.Fatalf("under rules 4 the task must complete where it failed (seq %d): %+v %v", events[len(events)-1].Seq, div, err)
			}
		})
	}
}

// A whole answer is whole whatever the word a provider says it with: "STOP",
// "end_turn", "eos_token" complete the task.
func TestWholeAnswersInOtherWordsComplete(t *testing.T) {
	for _, finish := range []string{"STOP", "end_turn", "eos_token", "Complete"} {
		h := newHarness(t, harnessOpts{model: script(t, llm.ScriptStep{Content: "144", FinishReason: finish})})
		h.submit("s", "t", "What is 12 * 12?")
		events := h.wait("s")
		if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
			t.Fatalf("finish_reason %q: the task ended %s: %s", finish, last.Type, last.Payload)
		}
	}
}
