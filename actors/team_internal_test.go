package actors

import (
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// The team state's rule: append adds after the key's values; merge replaces the
// values the same writer wrote (in place) and keeps every other writer's; the
// rendering is global first, then the members in the team's order, then the rest
// sorted, keys sorted.
func TestTeamStateFoldsAppendAndMergeWithoutOverwriting(t *testing.T) {
	s := teamState{}
	up := func(section, op, key, value, by string) {
		s.apply(messages.TeamStateUpdated{Section: section, Op: op, Key: key, Value: value, By: by})
	}
	up("global", messages.TeamOpMerge, "city", "Oslo", "a")
	up("global", messages.TeamOpMerge, "city", "Paris", "b")
	up("global", messages.TeamOpMerge, "city", "Bergen", "a") // a changes its own value, in place
	up("global", messages.TeamOpAppend, "log", "one", "team")
	up("global", messages.TeamOpAppend, "log", "two", "team")
	up("zeta", messages.TeamOpMerge, "answer", "z", "zeta")
	up("b", messages.TeamOpMerge, "answer", "B", "b")
	up("a", messages.TeamOpMerge, "answer", "A", "a")
	up("a", "replace", "answer", "A2", "x") // an op from the future is an append: nothing is lost
	got := s.render([]TeamMember{{Name: "b"}, {Name: "a"}}, rulesTeamPrompts-1)
	want := `<team_state>
<global>
<city by="a">Bergen</city>
<city by="b">Paris</city>
<log by="team">one</log>
<log by="team">two</log>
</global>
<member name="b">
<answer by="b">B</answer>
</member>
<member name="a">
<answer by="a">A</answer>
<answer by="x">A2</answer>
</member>
<member name="zeta">
<answer by="zeta">z</answer>
</member>
</team_state>`
	if got != want {
		t.Fatalf("rendered:\n%s\nwant:\n%s", got, want)
	}
	if teamState(nil).render(nil, ContextRules) != "" {
		t.Error("an empty state renders as something")
	}
	up("a", messages.TeamOpMerge, "long", strings.Repeat("é", teamValueCut), "a")
	if r := s.render(nil, rulesTeamPrompts-1); !strings.Contains(r, "é […4000 bytes cut]</long>") {
		t.Errorf("a long value is not cut on a character: %s", r[len(r)-200:])
	}
}

// From rules 7 a value of the team's state is shown whole up to the hand-over
// bound, escaped; past it, cut on a character with a note saying how much and
// where the whole value is.
func TestTeamStateValueIsWholeUpToTheHandOverBound(t *testing.T) {
	whole := strings.Repeat("<é>", TeamHandOverBytes/4)
	if got := teamValueText(rulesTeamPrompts, whole); got != strings.Repeat("&lt;é&gt;", TeamHandOverBytes/4) {
		t.Fatalf("a value within the bound is not whole and escaped: %d bytes", len(got))
	}
	long := strings.Repeat("é", TeamHandOverBytes)
	got := teamValueText(rulesTeamPrompts, long)
	note := fmt.Sprintf(" […%d bytes cut: the whole value is in the team's recorded state, its session's team.state_updated event]", TeamHandOverBytes)
	if !strings.HasSuffix(got, note) || got[:len(got)-len(note)] != long[:TeamHandOverBytes] {
		t.Fatalf("a value past the bound is not cut at it with a note: …%s", got[len(got)-200:])
	}
	if got := teamValueText(rulesTeamPrompts-1, "a</b>"); got != "a</b>" {
		t.Fatalf("under rules 6 a value is escaped: %q", got)
	}
}

// stateDirectives from rules 8: the STATE lines that end the answer, blank lines
// among them, before a handoff team's HANDOFF line; under older rules, all.
func TestStateDirectives(t *testing.T) {
	keys := func(ms [][]string) string {
		var k []string
		for _, m := range ms {
			k = append(k, m[1]+"="+m[2])
		}
		return strings.Join(k, ",")
	}
	for _, c := range []struct {
		answer  string
		handoff bool
		want    string
	}{
		{"text\nSTATE: a = 1\nmore\nSTATE: b = 2", false, "b=2"},
		{"STATE: a = 1\n\nSTATE: b = 2\n\n", false, "a=1,b=2"},
		{"text\nSTATE: a = 1\nHANDOFF: peer: go on", true, "a=1"},
		{"text\nSTATE: a = 1\nHANDOFF: peer: go on", false, ""},
		{"text\nSTATE: a = 1\r\nSTATE: b = x y \r\n", false, "a=1,b=x y"},
		{"no facts", false, ""},
		{"", true, ""},
	} {
		if got := keys(stateDirectives(rulesTeamState, c.handoff, c.answer)); got != c.want {
			t.Errorf("stateDirectives(%q, handoff %v) = %q; want %q", c.answer, c.handoff, got, c.want)
		}
	}
	if got := keys(stateDirectives(rulesTeamState-1, false, "text\nSTATE: a = 1\nmore\nSTATE: b = 2")); got != "a=1,b=2" {
		t.Errorf("under rules 7: %q; want every STATE line", got)
	}
}

// TeamDirectivesAt is where the lines that close an answer with directives start:
// any text, a line that is no directive, and the answer from there give a team of
// either kind the directives the whole answer gives it (a member's answer cut in
// its middle keeps them so: package node).
func TestTeamDirectivesAt(t *testing.T) {
	for _, c := range []struct {
		answer string
		tail   string
	}{
		{"text\nSTATE: a = 1\nmore\nSTATE: b = 2", "STATE: b = 2"},
		{"STATE: a = 1\n\nSTATE: b = 2\n\n", "STATE: a = 1\n\nSTATE: b = 2\n\n"},
		{"text\n\n\nSTATE: a = 1\nHANDOFF: peer: go on\n", "STATE: a = 1\nHANDOFF: peer: go on\n"},
		{"text\nHANDOFF: peer\n \n", "HANDOFF: peer\n \n"},
		{"text\nSTATE: a = 1\r\nSTATE: b = x y \r\n", "STATE: a = 1\r\nSTATE: b = x y \r\n"},
		{"text\nSTATE: a = 1\nHANDOFF: peer\nmore", ""},
		{"no facts\n\n", ""},
		{"", ""},
	} {
		at := TeamDirectivesAt(c.answer)
		if got := c.answer[at:]; got != c.tail || (got == "" && at != len(c.answer)) {
			t.Errorf("TeamDirectivesAt(%q) = %d: %q; want %q", c.answer, at, got, c.tail)
		}
		cut := "head, cut\n[cut]\n" + c.answer[at:]
		for _, handoff := range []bool{false, true} {
			if a, b := fmt.Sprint(stateDirectives(rulesTeamState, handoff, c.answer)), fmt.Sprint(stateDirectives(rulesTeamState, handoff, cut)); a != b {
				t.Errorf("%q, handoff %v: the whole answer sets %s, the cut one %s", c.answer, handoff, a, b)
			}
		}
		if a, b := fmt.Sprint(handoffDirective(rulesTeamState, c.answer)), fmt.Sprint(handoffDirective(rulesTeamState, cut)); a != b {
			t.Errorf("%q: the whole answer hands over %s, the cut one %s", c.answer, a, b)
		}
	}
}
