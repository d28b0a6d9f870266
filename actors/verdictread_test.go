package actors_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
)

// fencedRevise is a critic's verdict, one JSON object, whose suggestion quotes a
// fenced snippet, as a reviewer of code writes one.
const fencedRevise = "{\"verdict\": \"revise\", \"issues\": [{\"issue\": \"the command is not shown as code\", " +
	"\"suggestion\": \"put it in a fence: ```sh\\ngo test ./...\\n```\"}]}"

// A critic's verdict whose suggestion quotes a fenced snippet is read (rules 15):
// the loop revises, and the critic passes the revision. Under rules 14 the first
// "```" inside the object was taken for its fence, the verdict could not be read
// twice, and the first draft was given unjudged.
func TestReflectionVerdictQuotingAFenceIsRead(t *testing.T) {
	events, model, agent := reflecting(t, actors.Reflection{}, nil,
		text("Run go test ./..."), text(fencedRevise), text("Run:\n```sh\ngo test ./...\n```"), text(pass))
	done := completion(t, events)
	if done.Output != "Run:\n```sh\ngo test ./...\n```" || !strings.Contains(done.Note, "passed the answer in round 2") {
		t.Fatalf("completion %+v", done)
	}
	if got := purposes(t, events); got != "loop,critique,loop,critique" {
		t.Fatalf("model calls: %s", got)
	}
	loop := model.requests("")
	if revise := loop[len(loop)-1].Messages; !strings.Contains(revise[len(revise)-1].Content, "put it in a fence: ```sh\ngo test ./...\n```") {
		t.Fatalf("the revision request: %+v", revise[len(revise)-1])
	}
	verifyDeterministic(t, agent, events)
	if div := underOlderRules(t, agent, events, 14); div == nil {
		t.Fatal("under rules 14 the verdict is unreadable: the events must diverge")
	}
}

// A reflexion lesson whose do_instead quotes a fenced snippet is stored (rules 15),
// where under 14 it was "not a JSON object" and no lesson was kept.
func TestReflexionLessonQuotingAFenceIsStored(t *testing.T) {
	lesson := "{\"what_went_wrong\": \"I gave the command as prose.\", \"do_instead\": \"Show it as ```sh\\nmake\\n```.\"}"
	model := &recordingModel{Model: script(t,
		text("Run make."),
		text(`{"verdict": "revise", "issues": [{"issue": "the command is not shown as code"}]}`),
		text(lesson))}
	var agent actors.Agent
	h := newHarness(t, harnessOpts{model: model, tools: memoryTools(t), deps: func(d *actors.SessionDeps) {
		d.Agent.Paradigm = learner
		agent = d.Agent
	}})
	h.submit("fence", "task-fence", "How do I build it?")
	events := h.wait("fence")
	done := completion(t, events)
	if !strings.Contains(done.Note, "lesson stored as m_") {
		t.Fatalf("completion %+v", done)
	}
	stored := false
	for _, e := range events {
		if e.Type == messages.TypeToolCallRequested {
			if r := decode[*messages.ToolCallRequested](t, e); r.Purpose == actors.PurposeStoreLesson && strings.Contains(r.Arguments, "Show it as ```sh") {
				stored = true
			}
		}
	}
	if !stored {
		t.Fatalf("no lesson stored: %s", types(events))
	}
	verifyDeterministic(t, agent, events)
	if div := underOlderRules(t, agent, events, 14); div == nil {
		t.Fatal("under rules 14 the lesson is unreadable: the events must diverge")
	}
}

// A critic's unreadable verdict at the task's last model call, with no call left
// to ask it again, completes the task with the draft, noted as not judged (rules
// 15), as a second unreadable verdict does. Under 14 the retry was refused by the
// max steps: the task failed ("without a final answer"), its draft lost.
func TestReflectionUnreadableVerdictAtTheLastCall(t *testing.T) {
	model := &recordingModel{Model: script(t, text("It is 4 km"), text("Looks good to me"))}
	var agent actors.Agent
	h := newHarness(t, harnessOpts{model: model, maxSteps: 2, deps: func(d *actors.SessionDeps) {
		d.Agent.Paradigm = actors.Reflection{}
		agent = d.Agent
	}})
	h.submit("r", "task-r", "How far is it?")
	events := h.wait("r")
	done := completion(t, events)
	if done.Output != "It is 4 km" || done.Steps != 2 || !strings.Contains(done.Note, "could not be read (no JSON object found), and the task used its 2 model calls: the answer was not judged") {
		t.Fatalf("completion %+v", done)
	}
	if got := purposes(t, events); got != "loop,critique" {
		t.Fatalf("model calls: %s", got)
	}
	verifyDeterministic(t, agent, events)
	if div := underOlderRules(t, agent, events, 14); div == nil || !strings.Contains(div.Actual, "task.failed") {
		t.Fatalf("under rules 14 the task fails with max_steps: %+v", div)
	}
}

// A critic's verdict after the code it quotes from the draft, a fence of Go
// whose braces come before the verdict's own, is read (rules 15): the loop
// revises, and the critic passes the revision. Under 14 the quoted code was
// taken for the verdict, which could not be read.
func TestReflectionVerdictAfterQuotedCodeIsRead(t *testing.T) {
	critique := "The draft's code:\n```go\nfunc main() { fmt.Println(41) }\n```\nprints 41.\n" +
		`{"verdict": "revise", "issues": [{"issue": "it prints 41", "suggestion": "print 42"}]}`
	events, _, agent := reflecting(t, actors.Reflection{}, nil,
		text("func main() { fmt.Println(41) }"), text(critique), text("func main() { fmt.Println(42) }"), text(pass))
	done := completion(t, events)
	if done.Output != "func main() { fmt.Println(42) }" || !strings.Contains(done.Note, "passed the answer in round 2") {
		t.Fatalf("completion %+v", done)
	}
	verifyDeterministic(t, agent, events)
	if div := underOlderRules(t, agent, events, 14); div == nil {
		t.Fatal("under rules 14 the verdict is unreadable: the events must diverge")
	}
}

// A critic's unreadable verdict is quoted in its retry clipped to its head and
// tail (rules 15), as a planner's refused answer is: under 14 a 200 KB answer was
// sent back to the critic whole.
func TestReflectionRetryQuotesAnUnreadableVerdictClipped(t *testing.T) {
	huge := "Looks fine to me! " + strings.Repeat("x", 200_000) + " THE END"
	events, model, agent := reflecting(t, actors.Reflection{}, nil, text("42 km"), text(huge), text(pass))
	done := completion(t, events)
	if done.Output != "42 km" || !strings.Contains(done.Note, "passed") {
		t.Fatalf("completion: %+v", done)
	}
	crit := model.requests(actors.PurposeCritique)
	if len(crit) != 2 || len(crit[1].Messages) != 4 {
		t.Fatalf("the retry: %d critique requests", len(crit))
	}
	quoted := crit[1].Messages[2].Content
	if len(quoted) > 5000 || !strings.HasPrefix(quoted, "Looks fine to me!") || !strings.HasSuffix(quoted, "THE END") {
		t.Fatalf("the retry quotes %d bytes (head %.40q, tail %q); want the answer's head and tail, clipped", len(quoted), quoted, quoted[max(0, len(quoted)-20):])
	}
	verifyDeterministic(t, agent, events)
	if div := underOlderRules(t, agent, events, 14); div == nil {
		t.Fatal("under rules 14 the retry quotes the answer whole: the events must diverge")
	}
}
