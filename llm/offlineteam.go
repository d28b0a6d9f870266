package llm

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/troupe-run/troupe/messages"
)

// The offline model's part in a team's protocols (teamprotocol.go): enough that a
// team of offline agents runs every pattern, by rules as narrow as its others.
//
//   - A routing prompt (TeamRouteAsk): arithmetic goes to the first member with the
//     calculator tool, a question of time or date to the first with the clock, and
//     anything else to the fallback the prompt names.
//   - A judge's task (TeamJudgeAsk): it accepts the proposal most proposers agree on
//     (the same text, ignoring case and spacing), the first one on a tie.
//   - A member's task (after TeamBrief): its rules apply to the task, not to the
//     brief. A member asked arithmetic without the calculator, or the time without
//     the clock, hands the conversation to a peer that has it, when it may
//     (HANDOFF); a stage with no rule for the task passes the answer it builds on
//     along unchanged; an aggregator lists the members' answers.

var (
	routeFallback = regexp.MustCompile(`If none fits, choose "([^"]+)"`)
	memberEntry   = regexp.MustCompile(`^- ([a-z][a-z0-9_-]*): .*\(tools: ([^)]*)\)$`)
	buildOn       = regexp.MustCompile(`Build on the answer of "([^"]+)"`)
	combineOf     = regexp.MustCompile(`Combine the answers of ((?:"[^"]+"(?:, )?)+)`)
	judgeOf       = regexp.MustCompile(`Judge the proposals of ((?:"[^"]+"(?:, )?)+)`)
	quoted        = regexp.MustCompile(`"([^"]+)"`)
)

// offlineTeamMember is a member of a team as a team's prompt lists it.
type offlineTeamMember struct {
	name  string
	tools []string
}

// offlineTeam answers a team's routing prompt or a judge's task; ok is false for
// any other input.
func offlineTeam(input string) (msg messages.ChatMessage, ok bool) {
	answer := func(v any) (messages.ChatMessage, bool) {
		b, _ := json.Marshal(v) // maps of strings always encode
		return messages.ChatMessage{Role: messages.RoleAssistant, Content: string(b)}, true
	}
	switch {
	case strings.Contains(input, TeamJudgeAsk):
		names := quotedList(judgeOf.FindStringSubmatch(input))
		counts, first := map[string]int{}, map[string]string{}
		var winner, best string
		n := 0
		for _, name := range names {
			a, found := teamAnswer(input, name)
			if !found || strings.HasPrefix(a, "(failed)") {
				continue
			}
			n++
			k := strings.ToLower(strings.Join(strings.Fields(a), " "))
			if counts[k]++; first[k] == "" {
				first[k] = name
			}
			if winner == "" || counts[k] > counts[best] {
				winner, best = first[k], k
			}
		}
		if winner == "" {
			return answer(map[string]string{"verdict": "revise", "feedback": "I found no proposal to accept."})
		}
		return answer(map[string]string{"verdict": "accept", "winner": winner,
			"reason": fmt.Sprintf("%d of %d proposals agree with it (the offline model accepts the most common answer)", counts[best], n)})
	case strings.Contains(input, TeamRouteAsk):
		members := listedMembers(input, "Members:\n")
		fallback := ""
		if m := routeFallback.FindStringSubmatch(input); m != nil {
			fallback = m[1]
		}
		task := input
		if _, after, found := strings.Cut(input, "\nTask:\n"); found {
			task, _, _ = strings.Cut(after, "\n\n"+TeamRouteAsk)
		}
		member, reason := fallback, "no rule of the offline model fits the task: the fallback"
		if tool, why := neededTool(task); tool != "" {
			for _, m := range members {
				if contains(m.tools, tool) {
					member, reason = m.name, why+" and "+m.name+" has the "+tool+" tool"
					break
				}
			}
		}
		return answer(map[string]string{"member": member, "reason": reason})
	}
	return messages.ChatMessage{}, false
}

// offlineMember answers a member's task with the rules that need its brief, before
// the model's own rules run on the task (given back as task); ok is false when
// those rules should answer.
func offlineMember(input string, has func(string) bool) (task string, msg messages.ChatMessage, ok bool) {
	task, brief, found := strings.Cut(input, TeamBrief)
	if !found {
		return input, msg, false
	}
	say := func(s string) (string, messages.ChatMessage, bool) {
		return task, messages.ChatMessage{Role: messages.RoleAssistant, Content: s}, true
	}
	if strings.Contains(brief, TeamHandoff) {
		if tool, why := neededTool(task); tool != "" && !has(tool) {
			for _, m := range listedMembers(brief, "Peers:\n") {
				if contains(m.tools, tool) {
					return say(fmt.Sprintf("%s %s: %s, and %s has the %s tool", TeamHandoff, m.name, why, m.name, tool))
				}
			}
		}
	}
	if tool, _ := neededTool(task); (tool != "" && has(tool)) || strings.HasPrefix(strings.ToLower(strings.TrimSpace(task)), "echo") {
		return task, msg, false // the model's own rules answer
	}
	if m := buildOn.FindStringSubmatch(brief); m != nil {
		if a, found := teamAnswer(brief, m[1]); found {
			return say(a)
		}
	}
	if names := quotedList(combineOf.FindStringSubmatch(brief)); len(names) > 0 {
		var b strings.Builder
		for _, n := range names {
			if a, found := teamAnswer(brief, n); found {
				fmt.Fprintf(&b, "%s: %s\n", n, a)
			}
		}
		return say(strings.TrimSuffix(b.String(), "\n"))
	}
	return task, msg, false
}

// neededTool names the tool a task needs by the offline model's rules: the
// calculator for arithmetic, the clock for the time; "" for neither.
func neededTool(task string) (tool, why string) {
	if findExpression(strings.ToLower(task)) != "" {
		return "calculator", "the task is arithmetic"
	}
	if timeAsk.MatchString(task) {
		return "clock", "the task asks the time or date"
	}
	return "", ""
}

// listedMembers reads the members a prompt lists after header, one a line:
// "- name: description (tools: a, b)".
func listedMembers(s, header string) []offlineTeamMember {
	_, after, found := strings.Cut(s, header)
	if !found {
		return nil
	}
	var out []offlineTeamMember
	for _, line := range strings.Split(after, "\n") {
		m := memberEntry.FindStringSubmatch(line)
		if m == nil {
			break
		}
		var tools []string
		for _, t := range strings.Split(m[2], ",") {
			tools = append(tools, strings.TrimSpace(t))
		}
		out = append(out, offlineTeamMember{name: m[1], tools: tools})
	}
	return out
}

// teamAnswer finds a member's latest answer in a rendered team state.
func teamAnswer(s, member string) (string, bool) {
	_, sec, found := strings.Cut(s, "<member name="+strconv.Quote(member)+">\n")
	if !found {
		return "", false
	}
	sec, _, _ = strings.Cut(sec, "\n</member>")
	_, a, found := strings.Cut(sec, "<answer by="+strconv.Quote(member)+">")
	if !found {
		return "", false
	}
	a, _, _ = strings.Cut(a, "</answer>")
	return teamValueUnescaper.Replace(a), true
}

// teamValueUnescaper reads a value of a rendered team state as written: from
// decision rules 7 its "&", "<" and ">" are escaped (actors' teamValueText).
var teamValueUnescaper = strings.NewReplacer("&amp;", "&", "&lt;", "<", "&gt;", ">")

func quotedList(m []string) []string {
	if m == nil {
		return nil
	}
	var out []string
	for _, q := range quoted.FindAllStringSubmatch(m[1], -1) {
		out = append(out, q[1])
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
