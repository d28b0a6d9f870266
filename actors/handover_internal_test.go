package actors

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// aggregatorHandOver returns the arguments of a fan-out's hand-over to its
// aggregator under decision rules rules, its five branches having answered 256
// KiB each of "<" (each 6 bytes of JSON once escaped for the state: &lt;), and its
// task being input.
func aggregatorHandOver(t *testing.T, rules int, input string) string {
	t.Helper()
	p, err := NewTeam(Team{Pattern: TeamFanOut, Aggregator: "agg",
		Members: []TeamMember{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}, {Name: "e"}}})
	if err != nil {
		t.Fatal(err)
	}
	r := p.(*team).begin(messages.TaskSubmitted{Input: input, Rules: rules}).(*teamRun)
	for _, m := range []string{"a", "b", "c", "d", "e"} {
		r.state.apply(messages.TeamStateUpdated{Section: m, Op: messages.TeamOpMerge, Key: "answer", Value: strings.Repeat("<", TeamHandOverBytes), By: m})
	}
	w := &teamWant{id: "aggregate", member: "agg", purpose: "aggregate"}
	return r.handOverArgs(&view{a: Agent{Name: "panel"}}, w)
}

// From decision rules 11 a hand-over whose team state is past the bound (a
// fan-out's aggregator of five answers of 256 KiB, 7.5 MiB once escaped) holds
// each answer cut to the same length with its note, and the whole task and
// brief, within MaxHandOverArguments; a task past the bound too is cut in its
// middle, its head and tail kept. Under rules 10 it was made whole.
func TestTeamHandOverIsBoundedFromRules11(t *testing.T) {
	for _, input := range []string{"Combine the ideas.", "Combine: " + strings.Repeat("idea\n", 300_000) + "the end"} {
		args := aggregatorHandOver(t, rulesHandOverWithin, input)
		if len(args) > MaxHandOverArguments || len(args) < MaxHandOverArguments-64<<10 {
			t.Fatalf("a hand-over of %d bytes; want it within %d, and near it", len(args), MaxHandOverArguments)
		}
		var a DelegateArgs
		if err := json.Unmarshal([]byte(args), &a); err != nil || a.Agent != "agg" {
			t.Fatalf("%v %q", err, a.Agent)
		}
		if !strings.HasPrefix(a.Task, "Combine") || !strings.Contains(a.Task, "Combine the answers of") {
			t.Errorf("the task or the brief is not whole: %.200s", a.Task)
		}
		if strings.Count(a.Task, "bytes cut: the whole value is in the team's recorded state") != 5 || strings.Count(a.Task, "<member name=") != 5 {
			t.Errorf("the answers are not each cut with a note")
		}
		if long := len(input) > 1000; long != strings.Contains(a.Task, "bytes of the team's task cut here") || long && !strings.Contains(a.Task, "idea\nthe end") {
			t.Errorf("the task of %d bytes: cut %v, its tail kept %v", len(input), strings.Contains(a.Task, "cut here"), strings.Contains(a.Task, "the end"))
		}
	}
	if args := aggregatorHandOver(t, rulesHandOverWithin-1, "Combine the ideas."); len(args) < 7<<20 {
		t.Errorf("under rules 10 a hand-over of %d bytes; want it whole", len(args))
	}
}

// jsonCost is no less than what encoding/json writes, and cutMiddleWithin keeps
// within its room, on text of every kind: escapes, HTML, line separators,
// invalid UTF-8, multi-byte characters.
func TestJSONCostBoundsTheEncoding(t *testing.T) {
	for _, s := range []string{"", "plain", "a\"b\\c\n\r\t\b\f\x01", "<&>", "\u2028\u2029", "\xff\xfe", "é漢字🍵", "x\xe2\x80"} {
		s = strings.Repeat(s, 50)
		enc, _ := json.Marshal(s)
		if c := jsonCost(s); c < len(enc)-2 {
			t.Errorf("jsonCost(%q) = %d, encoding/json writes %d", s[:min(len(s), 20)], c, len(enc)-2)
		}
		for _, room := range []int{0, 100, 300} {
			got := cutMiddleWithin(s, room, "it")
			enc, _ := json.Marshal(got)
			if jsonCost(s) > room && len(enc)-2 > max(room, jsonCost(cutMiddleWithin(s, 0, "it"))) {
				t.Errorf("cut within %d: %d bytes of JSON", room, len(enc)-2)
			}
		}
	}
}
