package llm

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// The prompts below are as package actors writes them (actors/team.go); a node
// test runs them end to end.
const (
	routePrompt = "Choose the member of team \"desk\" who should do the task below.\n\nMembers:\n" +
		"- calculator: Does arithmetic. (tools: calculator)\n- timer: Tells the time. (tools: clock, calculator)\n- writer: Writes. (tools: none)\n" +
		"If none fits, choose \"writer\".\n\n<team_state>\n<global>\n<note by=\"a\">3 + 4</note>\n</global>\n</team_state>\n\nTask:\n%s\n\n" + TeamRouteAsk
	judgeTask = "Pick one.\n\n--- team brief ---\nYou are \"judge\", working for team \"review\" (pattern debate). Judge the proposals of \"a\", \"b\", \"c\" " +
		"(their answers in the team state) for round 1 of 2.\n" + TeamJudgeAsk + "\n\n<team_state>\n" +
		"<member name=\"a\">\n<answer by=\"a\">%s</answer>\n</member>\n<member name=\"b\">\n<answer by=\"b\">%s</answer>\n</member>\n" +
		"<member name=\"c\">\n<answer by=\"c\">%s</answer>\n</member>\n</team_state>"
)

func offlineAnswer(t *testing.T, input string, tools ...string) messages.ChatMessage {
	t.Helper()
	var specs []messages.ToolSpec
	for _, name := range tools {
		specs = append(specs, messages.ToolSpec{Name: name})
	}
	resp, err := Offline{}.Generate(context.Background(), Request{Step: 1, Tools: specs,
		Messages: []messages.ChatMessage{{Role: messages.RoleSystem, Content: "sys"}, {Role: messages.RoleUser, Content: input}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Message
}

func TestOfflineRoutesATeamsTask(t *testing.T) {
	for task, want := range map[string]string{
		"What is 12 * (7 + 5)?":   `{"member":"calculator","reason":"the task is arithmetic and calculator has the calculator tool"}`,
		"What time is it in UTC?": `{"member":"timer","reason":"the task asks the time or date and timer has the clock tool"}`,
		"Write a haiku about tea": `{"member":"writer","reason":"no rule of the offline model fits the task: the fallback"}`,
	} {
		if got := offlineAnswer(t, strings.Replace(routePrompt, "%s", task, 1)).Content; got != want {
			t.Errorf("route %q: %s; want %s", task, got, want)
		}
	}
}

func TestOfflineJudgesByAgreement(t *testing.T) {
	for _, c := range []struct{ a, b, c, want string }{
		{"144", "12", " 12 ", `{"reason":"2 of 3 proposals agree with it (the offline model accepts the most common answer)","verdict":"accept","winner":"b"}`},
		{"144", "12", "7", `{"reason":"1 of 3 proposals agree with it (the offline model accepts the most common answer)","verdict":"accept","winner":"a"}`},
		{"(failed) down", "(failed) down", "7", `{"reason":"1 of 1 proposals agree with it (the offline model accepts the most common answer)","verdict":"accept","winner":"c"}`},
	} {
		input := judgeTask
		for _, v := range []string{c.a, c.b, c.c} {
			input = strings.Replace(input, "%s", v, 1)
		}
		if got := offlineAnswer(t, input).Content; got != c.want {
			t.Errorf("judge %q %q %q: %s; want %s", c.a, c.b, c.c, got, c.want)
		}
	}
}

func TestOfflineWorksAsATeamMember(t *testing.T) {
	brief := func(role string) string {
		return TeamBrief + "You are \"m\", working for team \"t\". " + role + "\nTo share a fact with the team, add a line: STATE: <key> = <value>\n\n" +
			"<team_state>\n<member name=\"calculator\">\n<answer by=\"calculator\">144</answer>\n</member>\n" +
			"<member name=\"checker\">\n<answer by=\"checker\">1 + 143</answer>\n</member>\n</team_state>"
	}
	handoff := "Answer the task above yourself, or hand the conversation to a peer better placed to: end your answer with the line\n" +
		TeamHandoff + " <member>: <note for them>\nPeers:\n- calculator: Does arithmetic. (tools: calculator)\nEach member may have the conversation once."
	// Without the calculator, arithmetic goes to the peer that has it.
	if got := offlineAnswer(t, "What is 12 * (7 + 5)?"+brief(handoff)).Content; got != "HANDOFF: calculator: the task is arithmetic, and calculator has the calculator tool" {
		t.Errorf("handoff: %q", got)
	}
	// With it, the member computes the task, not the numbers of the brief.
	got := offlineAnswer(t, "What is 2 + 3?"+brief(handoff), "calculator")
	if len(got.ToolCalls) != 1 || got.ToolCalls[0].Arguments != `{"expression":"2 + 3"}` {
		t.Errorf("a member with the calculator: %+v", got)
	}
	// A stage passes on what it builds on; an aggregator lists the answers.
	if got := offlineAnswer(t, "What is 12 * (7 + 5)?"+brief(`You are stage 2 of 2. Build on the answer of "calculator" in the team state.`)).Content; got != "144" {
		t.Errorf("stage: %q", got)
	}
	if got := offlineAnswer(t, "Sum it up"+brief(`Combine the answers of "calculator", "checker" in the team state into one answer to the task above.`)).Content; got != "calculator: 144\nchecker: 1 + 143" {
		t.Errorf("aggregator: %q", got)
	}
	// A member task no team rule fits gets the model's own answer to the task alone.
	if got := offlineAnswer(t, "echo hi"+brief("Do it.")).Content; got != "hi" {
		t.Errorf("echo: %q", got)
	}
}

// A member's answer is read as written from a team state whose values are escaped
// (decision rules 7): a stage passes on "a < b & c", not "a &lt; b &amp; c".
func TestOfflineReadsAnEscapedTeamAnswer(t *testing.T) {
	input := "What is 12 * (7 + 5)?" + TeamBrief + `You are "m", working for team "t". You are stage 2 of 2. Build on the answer of "a" in the team state.` +
		"\n\n<team_state>\n<member name=\"a\">\n<answer by=\"a\">a &lt; b &amp; c &amp;lt;</answer>\n</member>\n</team_state>"
	if got := offlineAnswer(t, input).Content; got != "a < b & c &lt;" {
		t.Errorf("stage: %q", got)
	}
}
