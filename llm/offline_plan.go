package llm

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/troupe-run/troupe/messages"
)

// Tags of the plan_execute paradigm's prompts (package actors writes them): a
// system message holding <plan_request>…</plan_request> asks for a plan, a user
// message holding <step_results>…</step_results> for the answer written from a
// plan's results. The offline model knows these calls by them.
const (
	PlanRequestTag = "plan_request"
	StepResultsTag = "step_results"
)

var (
	// " and " between the parts of a compound question.
	andSplit = regexp.MustCompile(`(?i)[,;]?\s+and\s+`)
	// A step's block in <step_results>: "[s1] its goal", then its result.
	stepBlock = regexp.MustCompile(`(?m)^\[([A-Za-z][A-Za-z0-9_.-]*)\] (.*)$`)
)

// offlinePlanExecute answers the plan_execute paradigm's calls, when req is one:
//
//   - a plan: a question of arithmetic parts joined by "and" ("What is 2+3 and what
//     is 4*5?") is planned as one calculator step per part, independent of each
//     other; a question of one expression as one calculator step; anything else as
//     one step whose goal is the task (the agent's loop works it out);
//   - the answer: each step's goal with its result ("2+3 = 5 and 4*5 = 20"), or the
//     result alone when the plan had one step.
func offlinePlanExecute(req Request) (messages.ChatMessage, bool) {
	if len(req.Messages) < 2 {
		return messages.ChatMessage{}, false
	}
	sys, first := req.Messages[0], req.Messages[1]
	if sys.Role == messages.RoleSystem && strings.Contains(sys.Content, "<"+PlanRequestTag+">") && first.Role == messages.RoleUser {
		task := strings.TrimSpace(strings.TrimPrefix(first.Content, "Task:"))
		return messages.ChatMessage{Role: messages.RoleAssistant, Content: offlinePlanOf(task, strings.Contains(sys.Content, "\n- calculator:"))}, true
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role == messages.RoleUser {
		if _, rest, ok := strings.Cut(last.Content, "<"+StepResultsTag+">"); ok {
			body, _, _ := strings.Cut(rest, "</"+StepResultsTag+">")
			return messages.ChatMessage{Role: messages.RoleAssistant, Content: offlineJoin(body)}, true
		}
	}
	return messages.ChatMessage{}, false
}

type offlineStep struct {
	ID   string            `json:"id"`
	Goal string            `json:"goal"`
	Tool string            `json:"tool,omitempty"`
	Args map[string]string `json:"args,omitempty"`
	Deps []string          `json:"deps"`
}

func offlinePlanOf(task string, calculator bool) string {
	var steps []offlineStep
	if calculator {
		parts := andSplit.Split(strings.TrimRight(task, "?. "), -1)
		for i, part := range parts {
			expr := findExpression(strings.ToLower(part))
			if expr == "" {
				steps = nil
				break
			}
			steps = append(steps, offlineStep{ID: fmt.Sprintf("s%d", i+1), Goal: "compute " + expr, Tool: "calculator",
				Args: map[string]string{"expression": expr}, Deps: []string{}})
		}
	}
	if len(steps) == 0 {
		steps = []offlineStep{{ID: "s1", Goal: task, Deps: []string{}}}
	}
	answer := "give each result"
	if len(steps) == 1 {
		answer = "give the result"
	}
	b, _ := json.Marshal(struct {
		Steps  []offlineStep `json:"steps"`
		Answer string        `json:"answer"`
	}{steps, answer})
	return string(b)
}

// offlineJoin writes the answer from the <step_results> body.
func offlineJoin(body string) string {
	idx := stepBlock.FindAllStringSubmatchIndex(body, -1)
	var parts []string
	for i, m := range idx {
		end := len(body)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		goal := body[m[4]:m[5]]
		result := strings.TrimSpace(body[m[1]:end])
		if len(idx) == 1 {
			return result
		}
		if expr, ok := strings.CutPrefix(goal, "compute "); ok {
			parts = append(parts, expr+" = "+result)
		} else {
			parts = append(parts, goal+": "+result)
		}
	}
	if len(parts) == 0 {
		return "The plan had no results to answer from."
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}
