package node_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// a2aPython is the python of a virtual environment with the A2A Python SDK
// (a2a-sdk 1.x; deploy/a2a-py.sh installs it): $TROUPE_A2A_PY, else the one
// deploy/a2a-py.sh makes in ~/.cache/troupe-deploy. The test is skipped without it
// (it fails when CI=true).
func a2aPython(t *testing.T) string {
	t.Helper()
	return pythonWithA2A(t, "TROUPE_A2A_PY", "1.3.0")
}

// a2aPython03 is the python of a virtual environment with the A2A Python SDK
// 0.3.x (A2A_PY_VERSION=0.3.26 deploy/a2a-py.sh): $TROUPE_A2A_PY03, else the one
// in ~/.cache/troupe-deploy.
func a2aPython03(t *testing.T) string {
	t.Helper()
	return pythonWithA2A(t, "TROUPE_A2A_PY03", "0.3.26")
}

func pythonWithA2A(t *testing.T, env, version string) string {
	t.Helper()
	py := os.Getenv(env)
	if py == "" {
		home, _ := os.UserHomeDir()
		py = filepath.Join(home, ".cache", "troupe-deploy", "a2a-py-"+version, "bin", "python")
	}
	if _, err := os.Stat(py); err != nil {
		msg := "the A2A Python SDK " + version + " is missing (run A2A_PY_VERSION=" + version + " deploy/a2a-py.sh; " + env + " names its python)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return py
}

// runA2APy runs node/testdata/a2a-py-client.py against the node at base in mode
// (with args) and decodes what it prints into out.
func runA2APy(t *testing.T, base, mode string, out any, args ...string) {
	t.Helper()
	runPython(t, a2aPython(t), "a2a-py-client.py", base, mode, out, args...)
}

// runPython runs script (in testdata) with py against the node at base in mode
// (with args) and decodes what it prints into out.
func runPython(t *testing.T, py, script, base, mode string, out any, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join("testdata", script), base, mode}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("python %s (%s): %v\n%s", script, mode, err, stderr.String())
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		t.Fatalf("output %q: %v\n%s", stdout, err, stderr.String())
	}
}

// a2aPyStream is what the script prints of a streamed message.
type a2aPyStream struct {
	Events                    []string
	TaskID, ContextID, Answer string
	State, Message, Error     string
}

// a2aPyTask is what the script prints of a task.
type a2aPyTask struct {
	ID, ContextID, State, Answer string
	Artifacts, History           []string
}

// The session's events: the task submitted once, ended once with want.
func oneTaskEnded(t *testing.T, n *node.Node, session string, want messages.Type) []messages.Envelope {
	t.Helper()
	events := waitEnded(t, n, session)
	submitted, ended := 0, 0
	for _, e := range events {
		switch e.Type {
		case messages.TypeTaskSubmitted:
			submitted++
		case messages.TypeTaskCompleted, messages.TypeTaskFailed:
			ended++
			if e.Type != want {
				t.Errorf("session %s ended with %s, want %s", session, e.Type, want)
			}
		}
	}
	if submitted != 1 || ended != 1 {
		t.Errorf("session %s: %d tasks submitted, %d ended, want one of each: %s", session, submitted, ended, eventTypes(events))
	}
	return events
}

// a2aPyConversation is what the script prints in modes default and legacy.
type a2aPyConversation struct {
	Protocol, Transport string
	Stream, Context     a2aPyStream
	Get                 a2aPyTask
	Send                struct {
		Responses int
		Task      *a2aPyTask
	}
}

// tasksOf counts the tasks submitted, completed and failed in a session's events.
func tasksOf(events []messages.Envelope) (submitted, completed, failed int) {
	for _, e := range events {
		switch e.Type {
		case messages.TypeTaskSubmitted:
			submitted++
		case messages.TypeTaskCompleted:
			completed++
		case messages.TypeTaskFailed:
			failed++
		}
	}
	return submitted, completed, failed
}

// TestA2APyClient runs the Python SDK's client (a2a-sdk 1.x) against a node, as
// its README shows it (the card resolved, ClientFactory with the default
// ClientConfig): in A2A 1.0 from the card's supportedInterfaces, and in 0.3 from
// the card as a 0.3-only server serves it. A message streamed (statuses, the
// calculator's call, the answer artifact, completed), the task read back, a second
// message in the same context (the same session), and a message sent without
// streaming (SendMessage, answered with the ended task); the sessions' events have
// each task submitted once and completed once.
func TestA2APyClient(t *testing.T) {
	a2aPython(t)
	n, base := a2aNode(t, node.Config{Model: llm.Offline{}, Tools: []tools.Tool{tools.Calculator{}}})
	for _, mode := range []string{"default", "legacy"} {
		t.Run(mode, func(t *testing.T) {
			var out a2aPyConversation
			runA2APy(t, base, mode, &out)
			want := map[string][2]string{"default": {"1.0", "JsonRpcTransport"}, "legacy": {"0.3.0", "CompatJsonRpcTransport"}}[mode]
			if out.Protocol != want[0] || out.Transport != want[1] {
				t.Fatalf("the client speaks %q over %s, want %q over %s", out.Protocol, out.Transport, want[0], want[1])
			}
			const question = "What is 12 * (7 + 5)?"
			s := out.Stream
			events := []string{"task:TASK_STATE_SUBMITTED", "status:TASK_STATE_WORKING", "status:TASK_STATE_WORKING:calling tool calculator",
				"artifact:answer:144:last", "status:TASK_STATE_COMPLETED:144"}
			if strings.Join(s.Events, " | ") != strings.Join(events, " | ") || s.Error != "" || s.Answer != "144" {
				t.Fatalf("stream:\n got %q (%s)\nwant %q", s.Events, s.Error, events)
			}
			if g := out.Get; g.ID != s.TaskID || g.ContextID != s.ContextID || g.State != "TASK_STATE_COMPLETED" || g.Answer != "144" ||
				strings.Join(g.Artifacts, ",") != "answer" || len(g.History) == 0 || g.History[0] != question {
				t.Fatalf("get_task: %+v, want the streamed task %s", g, s.TaskID)
			}
			if c := out.Context; c.ContextID != s.ContextID || c.TaskID == s.TaskID || c.State != "TASK_STATE_COMPLETED" || c.Answer != "same session" {
				t.Fatalf("a second message in context %s: %+v", s.ContextID, c)
			}
			if sub, done, failed := tasksOf(waitEnded(t, n, s.ContextID)); sub != 2 || done != 2 || failed != 0 {
				t.Fatalf("session %s: %d tasks submitted, %d completed, %d failed, want 2, 2, 0", s.ContextID, sub, done, failed)
			}
			sent := out.Send.Task
			if out.Send.Responses != 1 || sent == nil || sent.State != "TASK_STATE_COMPLETED" || sent.Answer != "144" || sent.ContextID == s.ContextID {
				t.Fatalf("send without streaming: %+v", out.Send)
			}
			oneTaskEnded(t, n, sent.ContextID, messages.TypeTaskCompleted)
		})
	}
}

// The Python client cancels the task of the message it streams (cancel_task, at
// the stream's first event, while the model call is held or about to be):
// cancel_task answers the task canceled, the stream ends with it, get_task says
// so, and the session's one task failed as cancelled, its model call never
// answered; a call the provider held is let go. The stream's first event comes as
// the session takes the task: the cancel may come before the call reached the
// provider, or was made at all.
func TestA2APyClientCancels(t *testing.T) {
	a2aPython(t)
	srv, model := heldProvider(t)
	n, base := a2aNode(t, node.Config{Model: model})
	var out struct {
		Stream      a2aPyStream
		Cancel, Get a2aPyTask
		Again       string
	}
	runA2APy(t, base, "cancel", &out)
	s := out.Stream
	if out.Cancel.ID != s.TaskID || out.Cancel.State != "TASK_STATE_CANCELED" {
		t.Fatalf("cancel_task: %+v (the stream: %+v)", out.Cancel, s)
	}
	if s.Error != "" || s.State != "TASK_STATE_CANCELED" || len(s.Events) < 2 || s.Events[0] != "task:TASK_STATE_SUBMITTED" {
		t.Fatalf("stream: %+v", s)
	}
	if out.Get.State != "TASK_STATE_CANCELED" {
		t.Fatalf("get_task after the cancel: %+v", out.Get)
	}
	// The task, cancelled, is not cancelled again (-32002), as the SDK's own
	// server answers.
	if !strings.HasPrefix(out.Again, "TaskNotCancelableError") {
		t.Fatalf("cancel_task of the cancelled task: %q, want TaskNotCancelableError", out.Again)
	}
	events := waitFailed(t, n, s.ContextID, messages.ReasonCancelled)
	noneOf(t, events, messages.TypeModelResponded)
	if sub, done, failed := tasksOf(events); sub != 1 || done != 0 || failed != 1 {
		t.Fatalf("session %s: %d tasks submitted, %d completed, %d failed: %s", s.ContextID, sub, done, failed, eventTypes(events))
	}
	if len(srv.Requests()) > 0 {
		select {
		case <-srv.Disconnected():
		case <-time.After(30 * time.Second): // far below the model call's timeout
			t.Fatal("the task was cancelled, and the provider still holds its model call")
		}
	}
}

// The Python client streams a message to an agent whose tool call waits for
// approval: the stream ends with the task in input-required, its message naming
// the call; the client answers "approve" to the task (its taskId and contextId),
// and that message's stream follows the task to its end. The tool ran once.
func TestA2APyClientApproves(t *testing.T) {
	a2aPython(t)
	var sent atomic.Int64
	n, base := a2aNode(t, mailer(t, &sent))
	var out struct {
		First, Second a2aPyStream
		Get           a2aPyTask
	}
	runA2APy(t, base, "approve", &out, "/a2a/mailer/.well-known/agent-card.json")
	f, s := out.First, out.Second
	if f.Error != "" || f.State != "TASK_STATE_INPUT_REQUIRED" || !strings.Contains(f.Message, "send_email") {
		t.Fatalf("first stream: %+v", f)
	}
	if s.Error != "" || s.TaskID != f.TaskID || s.State != "TASK_STATE_COMPLETED" || s.Answer != "handled" {
		t.Fatalf("after approve: %+v", s)
	}
	if out.Get.State != "TASK_STATE_COMPLETED" || out.Get.Answer != "handled" {
		t.Fatalf("get_task: %+v", out.Get)
	}
	if sent.Load() != 1 {
		t.Fatalf("%d emails sent, want 1", sent.Load())
	}
	oneTaskEnded(t, n, f.ContextID, messages.TypeTaskCompleted)
}

// TestA2APyClientHostileInput: what the Python client sends that a node must
// bear. Odd text (unicode, quotes, backslashes, NUL and other control characters,
// U+2028, a BOM, U+10FFFF) comes back whole; an input of the node's 1 MiB is a
// task, a byte more is InvalidParams saying why, a body over 2 MiB is HTTP 413, an
// empty text InvalidParams; and what the SDK would not send (raw JSON-RPC: a lone
// surrogate, bytes that are not UTF-8, params nested 100000 deep, a raw NUL, no
// parts, wrong types, a cut body) is answered, never held.
func TestA2APyClientHostileInput(t *testing.T) {
	a2aPython(t)
	n, base := a2aNode(t, node.Config{Model: llm.Offline{}})
	type attempt struct {
		State, Error, ContextID string
		AnswerLen, Events       int
	}
	var out struct {
		Odd                      a2aPyStream
		OddWant                  string
		OddGet                   a2aPyTask
		Under, Over, Huge, Empty attempt
		Unknown                  string
		Raw                      map[string]struct {
			Status, Code   int
			Message, Error string
			Result         bool
		}
	}
	runA2APy(t, base, "hostile", &out)
	if out.Odd.State != "TASK_STATE_COMPLETED" || out.Odd.Answer != out.OddWant || out.Odd.Message != out.OddWant {
		t.Fatalf("odd text:\n got %+q\nwant %+q", out.Odd.Answer, out.OddWant)
	}
	if out.OddGet.Answer != out.OddWant || len(out.OddGet.History) == 0 || out.OddGet.History[0] != "echo "+out.OddWant {
		t.Fatalf("odd text read back: %+v", out.OddGet)
	}
	for _, e := range oneTaskEnded(t, n, out.Odd.ContextID, messages.TypeTaskCompleted) {
		if e.Type == messages.TypeTaskCompleted {
			p, err := e.Decode()
			if err != nil || p.(*messages.TaskCompleted).Output != out.OddWant {
				t.Fatalf("the recorded answer: %s (%v)", e.Payload, err)
			}
		}
	}
	if u := out.Under; u.State != "TASK_STATE_COMPLETED" || u.Error != "" || u.AnswerLen == 0 {
		t.Fatalf("an input of 1 MiB: %+v", u)
	} else if _, output := recordedAnswer(t, n, u.ContextID); len(output) != u.AnswerLen {
		t.Fatalf("an input of 1 MiB: the client has %d bytes of answer, the log %d", u.AnswerLen, len(output))
	}
	for name, c := range map[string]struct {
		got  attempt
		want string
	}{
		"over":  {out.Over, "InvalidParamsError: invalid params: bad task: input is 1048577 bytes, the limit is 1 MiB"},
		"huge":  {out.Huge, "A2AClientError: HTTP Error 413"},
		"empty": {out.Empty, "InvalidParamsError: invalid params: the message has no text part"},
	} {
		if !strings.HasPrefix(c.got.Error, c.want) || c.got.Events != 0 {
			t.Errorf("%s: %+v, want the error %q", name, c.got, c.want)
		}
	}
	if !strings.HasPrefix(out.Unknown, "TaskNotFoundError") {
		t.Errorf("get_task of an unknown task: %q", out.Unknown)
	}
	// Bytes that are not UTF-8 are a parse error, not a message run on U+FFFD in
	// their place (a lone surrogate's escape is JSON: it runs).
	for name, want := range map[string]int{"loneSurrogate": 0, "invalidUtf8": -32700, "deepParams": -32602, "nulInJSON": -32700,
		"noParts": -32602, "wrongTypes": -32602, "truncated": -32700} {
		r, ok := out.Raw[name]
		if !ok || r.Error != "" || r.Status != 200 || r.Code != want || (want == 0) != r.Result {
			t.Errorf("raw %s: %+v, want code %d", name, r, want)
		}
	}
	// The sessions written: the odd text's, the 1 MiB input's and the raw message
	// answered (the lone surrogate's); each with one task, completed.
	sessions, err := n.Log().Sessions(context.Background(), eventlog.Filter{SessionsOnly: true}) // not the agent's configuration's stream
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 3 {
		t.Errorf("%d sessions, want 3: %+v", len(sessions), sessions)
	}
	for _, s := range sessions {
		oneTaskEnded(t, n, s.ID, messages.TypeTaskCompleted)
	}
}

// The slow step: a model that answers after 7 s, longer than the 5 s the SDK's
// HTTP client (httpx's default timeout) waits for a byte of a stream.
func TestA2APyClientWaitsOutASlowStep(t *testing.T) {
	a2aPython(t)
	n, base := a2aStreamingNode(t, 0, func(int) openaitest.Reply {
		r := openaitest.TextStream(messages.Usage{PromptTokens: 5, CompletionTokens: 2}, "slow ", "answer")
		r.Delay = 7 * time.Second
		return r
	})
	var out struct{ Stream a2aPyStream }
	runA2APy(t, base, "one", &out)
	s := out.Stream
	if s.Error != "" || s.State != "TASK_STATE_COMPLETED" || s.Answer != "slow answer" {
		t.Fatalf("stream: %+v", s)
	}
	oneTaskEnded(t, n, s.ContextID, messages.TypeTaskCompleted)
}

// The Python client streams a provider's 100 tokens: each an event of the answer
// artifact, the first replacing it and the others appended, then the recorded
// answer, whole, as its last chunk; the answer the client folds is the one
// recorded.
func TestA2APyClientStreamsDeltas(t *testing.T) {
	a2aPython(t)
	pieces := tokens(100)
	n, base := a2aStreamingNode(t, 0, func(int) openaitest.Reply {
		return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 100}, pieces...)
	})
	var out struct{ Stream a2aPyStream }
	runA2APy(t, base, "one", &out)
	s := out.Stream
	var artifacts []string
	for _, e := range s.Events {
		if strings.HasPrefix(e, "artifact:") {
			artifacts = append(artifacts, e)
		}
	}
	if s.Error != "" || len(artifacts) < 102 {
		t.Fatalf("%d artifact events (%s): %q", len(artifacts), s.Error, s.Events)
	}
	for i, p := range pieces {
		want := "artifact:answer:" + p
		if i > 0 {
			want += ":append"
		}
		if artifacts[i] != want {
			t.Fatalf("artifact event %d: %q, want %q", i, artifacts[i], want)
		}
	}
	whole := strings.Join(pieces, "")
	if last := artifacts[len(artifacts)-1]; last != "artifact:answer:"+whole+":last" || s.Answer != whole ||
		s.State != "TASK_STATE_COMPLETED" || s.Message != whole {
		t.Fatalf("end: last artifact %q, answer %q, state %s", last, s.Answer, s.State)
	}
	if _, output := recordedAnswer(t, n, s.ContextID); output != whole {
		t.Fatalf("recorded %q", output)
	}
}

// The Python client subscribes (SubscribeToTask) to a task waiting for approval:
// the task comes first, as it waits; approved by another client, it goes on to
// its end, which ends the subscription. The ended task is refused as 1.0 says
// (UnsupportedOperationError), and so is an unknown one (TaskNotFoundError).
func TestA2APyClientSubscribes(t *testing.T) {
	a2aPython(t)
	var sent atomic.Int64
	n, base := a2aNode(t, mailer(t, &sent))
	var out struct {
		First, Subscribed, Ended, Unknown a2aPyStream
		Approved                          a2aPyTask
	}
	runA2APy(t, base, "subscribe", &out, "/a2a/mailer/.well-known/agent-card.json")
	if out.First.State != "TASK_STATE_INPUT_REQUIRED" {
		t.Fatalf("first stream: %+v", out.First)
	}
	sub := out.Subscribed
	if sub.Error != "" || len(sub.Events) < 3 || sub.Events[0] != "task:TASK_STATE_INPUT_REQUIRED" ||
		sub.Events[len(sub.Events)-1] != "status:TASK_STATE_COMPLETED:handled" || sub.Answer != "handled" {
		t.Fatalf("subscription: %+v", sub)
	}
	if out.Approved.ID != out.First.TaskID || out.Approved.State != "TASK_STATE_COMPLETED" {
		t.Fatalf("the approval sent without streaming: %+v", out.Approved)
	}
	if !strings.HasPrefix(out.Ended.Error, "UnsupportedOperationError") || len(out.Ended.Events) != 0 {
		t.Fatalf("subscribing to the ended task: %+v", out.Ended)
	}
	if !strings.HasPrefix(out.Unknown.Error, "TaskNotFoundError") || len(out.Unknown.Events) != 0 {
		t.Fatalf("subscribing to an unknown task: %+v", out.Unknown)
	}
	if sent.Load() != 1 {
		t.Fatalf("%d emails sent, want 1", sent.Load())
	}
	oneTaskEnded(t, n, out.First.ContextID, messages.TypeTaskCompleted)
}

// The Python client sets, reads, lists and deletes a push notification config of
// a task: each answer is the config as set (its token and credentials too); a
// config for a task the node does not know is refused (TaskNotFoundError).
func TestA2APyClientPushConfigs(t *testing.T) {
	a2aPython(t)
	_, base := a2aNode(t, node.Config{Model: llm.Offline{}})
	type cfg struct{ ID, TaskID, URL, Token, Scheme, Credentials string }
	var out struct {
		TaskID      string
		Made, Got   cfg
		Listed      []cfg
		After       int
		UnknownTask string
	}
	runA2APy(t, base, "push", &out)
	want := cfg{ID: "hook-1", TaskID: out.TaskID, URL: "https://hooks.example.com/a2a", Token: "tok", Scheme: "Bearer", Credentials: "secret"}
	if out.TaskID == "" || out.Made != want || out.Got != want || len(out.Listed) != 1 || out.Listed[0] != want || out.After != 0 {
		t.Fatalf("push configs: %+v, want %+v", out, want)
	}
	if !strings.HasPrefix(out.UnknownTask, "TaskNotFoundError") {
		t.Fatalf("a config for an unknown task: %q", out.UnknownTask)
	}
}

// TestA2APy03Client runs the Python SDK 0.3's client (a2a-sdk 0.3.x, which reads
// the card's url and speaks A2A 0.3) as its README shows it: a message streamed, the
// task read back, a second message in its context, one sent without streaming;
// and a stream through a model step slower than its 5 s read timeout (the SSE
// comments that keep the stream alive are no events to it).
func TestA2APy03Client(t *testing.T) {
	py := a2aPython03(t)
	t.Run("conversation", func(t *testing.T) {
		n, base := a2aNode(t, node.Config{Model: llm.Offline{}, Tools: []tools.Tool{tools.Calculator{}}})
		var out a2aPyConversation
		runPython(t, py, "a2a-py-client-03.py", base, "default", &out)
		s := out.Stream
		events := []string{"task:TASK_STATE_SUBMITTED", "status:TASK_STATE_WORKING", "status:TASK_STATE_WORKING:calling tool calculator",
			"artifact:answer:144:last", "status:TASK_STATE_COMPLETED:144"}
		if out.Protocol != "0.3.0" || strings.Join(s.Events, " | ") != strings.Join(events, " | ") || s.Error != "" || s.Answer != "144" {
			t.Fatalf("protocol %q, stream:\n got %q (%s)\nwant %q", out.Protocol, s.Events, s.Error, events)
		}
		if g := out.Get; g.ID != s.TaskID || g.State != "TASK_STATE_COMPLETED" || g.Answer != "144" {
			t.Fatalf("get_task: %+v", g)
		}
		if c := out.Context; c.ContextID != s.ContextID || c.TaskID == s.TaskID || c.Answer != "same session" {
			t.Fatalf("a second message in context %s: %+v", s.ContextID, c)
		}
		if sub, done, failed := tasksOf(waitEnded(t, n, s.ContextID)); sub != 2 || done != 2 || failed != 0 {
			t.Fatalf("session %s: %d tasks submitted, %d completed, %d failed, want 2, 2, 0", s.ContextID, sub, done, failed)
		}
		if sent := out.Send.Task; out.Send.Responses != 1 || sent == nil || sent.State != "TASK_STATE_COMPLETED" || sent.Answer != "144" {
			t.Fatalf("send without streaming: %+v", out.Send)
		}
	})
	t.Run("slow", func(t *testing.T) {
		n, base := a2aStreamingNode(t, 0, func(int) openaitest.Reply {
			r := openaitest.TextStream(messages.Usage{PromptTokens: 5, CompletionTokens: 2}, "slow ", "answer")
			r.Delay = 7 * time.Second
			return r
		})
		var out struct{ Stream a2aPyStream }
		runPython(t, py, "a2a-py-client-03.py", base, "one", &out)
		if s := out.Stream; s.Error != "" || s.State != "TASK_STATE_COMPLETED" || s.Answer != "slow answer" {
			t.Fatalf("stream: %+v", s)
		}
		oneTaskEnded(t, n, out.Stream.ContextID, messages.TypeTaskCompleted)
	})
}
