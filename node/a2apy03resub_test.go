package node_test

import (
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// The Python SDK 0.3's client takes a task up again with tasks/resubscribe
// through a model step slower than the stream's keep-alive: the SSE comments
// that keep the stream alive are no events to it. (Each comment ended with a
// blank line, which httpx-sse, keeping the last event's id as the SSE
// specification says, dispatched as an event with no data: the SDK's
// message/stream skips those, its resubscribe failed on one, a pydantic
// ValidationError "EOF while parsing a value".)
func TestA2APy03ResubscribeThroughASlowStep(t *testing.T) {
	py := a2aPython03(t)
	n, base := a2aStreamingNode(t, 0, func(int) openaitest.Reply {
		r := openaitest.TextStream(messages.Usage{PromptTokens: 5, CompletionTokens: 2}, "slow ", "answer")
		r.Delay = 5 * time.Second
		return r
	})
	var out struct{ Stream, Subscribed a2aPyStream }
	runPython(t, py, "a2a-py-client-03.py", base, "resubscribe", &out)
	sub := out.Subscribed
	if out.Stream.TaskID == "" || sub.Error != "" || sub.State != "TASK_STATE_COMPLETED" || sub.Answer != "slow answer" ||
		!strings.HasPrefix(strings.Join(sub.Events, " | "), "task:TASK_STATE_WORKING") {
		t.Fatalf("the task %q taken up again: %+v", out.Stream.TaskID, sub)
	}
	oneTaskEnded(t, n, out.Stream.ContextID, messages.TypeTaskCompleted)
}
