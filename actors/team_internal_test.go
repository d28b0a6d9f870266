package actors

import (
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
	got := s.render([]TeamMember{{Name: "b"}, {Name: "a"}})
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
	if teamState(nil).render(nil) != "" {
		t.Error("an empty state renders as something")
	}
	up("a", messages.TeamOpMerge, "long", strings.Repeat("é", teamValueCut), "a")
	if r := s.render(nil); !strings.Contains(r, "é […4000 bytes cut]</long>") {
		t.Errorf("a long value is not cut on a character: %s", r[len(r)-200:])
	}
}
