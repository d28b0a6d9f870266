package actors_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// rulesBeforeJSONBody is the last version of the decision rules whose team read a
// routing answer or a judge's verdict from the answer's first '{' on.
const rulesBeforeJSONBody = 14

// A router whose answer writes braces in its prose before its JSON object (set
// notation, a template, code) routes to the member its object names. Under rules
// 14 the object was read from the first '{', the prose's, and the task went to the
// fallback; a task recorded so still does.
func TestTeamRouterReadsTheObjectAfterBracesInItsProse(t *testing.T) {
	agent := newTeamAgent(t, "desk", "scripted", actors.Team{Pattern: actors.TeamOrchestrator, Members: members("calc", "writer"),
		ModelRouting: true, Fallback: "writer"})
	route := llm.ScriptStep{Content: "The task asks for the size of {1, 2, 3} ∪ {3, 4}: arithmetic.\n" +
		"```json\n{\"member\": \"calc\", \"reason\": \"set arithmetic\"}\n```"}
	d := newDelegates(map[string]memberFunc{"calc": answer("4"), "writer": answer("a poem")})
	events := runTeam(t, agent, script(t, route), d, "How many elements has {1, 2, 3} ∪ {3, 4}?")
	wantCompleted(t, events, "4")
	if ups := stateUpdates(t, events); !strings.Contains(ups[0], "calc: the model's choice: set arithmetic") {
		t.Fatalf("state updates: %q", ups)
	}
	verifyTeam(t, agent, events)
	wantDiverges(t, agent, events, rulesBeforeJSONBody)

	d = newDelegates(map[string]memberFunc{"calc": answer("4"), "writer": answer("a poem")})
	events = recordTeam(t, agent, rulesBeforeJSONBody, route, d, "How many elements has {1, 2, 3} ∪ {3, 4}?")
	wantCompleted(t, events, "a poem")
	verifyTeam(t, agent, events)
}

// A debate's judge that quotes a proposal's code before its verdict accepts the
// proposal it names. Under rules 14 the verdict was read from the first '{', the
// quoted code's, and the round ended with no verdict (another round, and at the
// last one no_verdict); a task recorded so still does.
func TestTeamJudgeReadsTheVerdictAfterQuotedCode(t *testing.T) {
	agent := newTeamAgent(t, "court", "scripted", actors.Team{Pattern: actors.TeamDebate, Members: members("pro", "con"), Judge: "judge", Rounds: 1})
	judge := "con's `func one() int { return 1 }` compiles, pro's does not.\n" +
		`{"verdict": "accept", "winner": "con", "reason": "it compiles"}`
	members := func() *delegates {
		return newDelegates(map[string]memberFunc{"pro": answer("func one() int { 1 }"), "con": answer("func one() int { return 1 }"), "judge": answer(judge)})
	}
	events := runTeam(t, agent, nil, members(), "write one()")
	wantCompleted(t, events, "func one() int { return 1 }")
	verifyTeam(t, agent, events)
	wantDiverges(t, agent, events, rulesBeforeJSONBody)

	events = recordTeam(t, agent, rulesBeforeJSONBody, llm.ScriptStep{}, members(), "write one()")
	wantFailed(t, events, messages.ReasonNoVerdict, "no verdict")
	verifyTeam(t, agent, events)
}
