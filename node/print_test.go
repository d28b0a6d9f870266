package node_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

func TestEscapeControls(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, déjà vu, 日本語, emoji 🎭": "plain text, déjà vu, 日本語, emoji 🎭",
		"two\nlines\tand a tab":             "two\nlines\tand a tab",
		"\x1b[2Jcleared":                    `\x1b[2Jcleared`,
		"\x1b]0;title\x07":                  `\x1b]0;title\a`,
		"over\rwrite":                       `over\rwrite`,
		"nul\x00 del\x7f bs\b ff\f vt\v":    `nul\x00 del\x7f bs\b ff\f vt\v`,
		"c1 csi \u009b31m nel \u0085":       `c1 csi \u009b31m nel \u0085`,
		"file\u202egnp.exe":                 `file\u202egnp.exe`,
		"iso\u2066late\u2069 lrm\u200e":     `iso\u2066late\u2069 lrm\u200e`,
		"line\u2028sep":                     `line\u2028sep`,
		"raw byte \x9b31m and \xff":         `raw byte \x9b31m and \xff`,
		"a real \ufffd stays":               "a real \ufffd stays",
		"":                                  "",
	} {
		if got := node.EscapeControls(in); got != want {
			t.Errorf("EscapeControls(%q) = %q, want %q", in, got, want)
		}
	}
}

// PrintStep, which node run and replay fork print with, escapes what it prints.
func TestPrintStepEscapesControls(t *testing.T) {
	e, err := messages.NewEnvelope(&messages.TaskCompleted{Output: "done\x1b[2J\u202e", Steps: 1})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code, done := node.PrintStep(&out, e); code != 0 || !done {
		t.Fatalf("PrintStep = %d, %v", code, done)
	}
	if got := out.String(); strings.ContainsAny(got, "\x1b\u202e") || !strings.Contains(got, `answer: done\x1b[2J\u202e`+"\n") {
		t.Fatalf("PrintStep printed %q", got)
	}
}

// A tool's name is the model's text: one with a newline (a made-up tool) stays on
// its step's one line, as do a request's arguments.
func TestPrintStepKeepsToolNamesOnTheLine(t *testing.T) {
	for _, p := range []messages.Payload{
		&messages.ModelResponded{Model: "m", Message: messages.ChatMessage{Role: "assistant",
			ToolCalls: []messages.ToolCall{{ID: "c1", Name: "fake\n  [9] done in 1 steps\nanswer: forged", Arguments: "{}"}}}},
		&messages.ToolCallRequested{CallID: "c1", Tool: "fake\nanswer: forged", Arguments: "{\n\"a\":1}"},
		&messages.ToolCallCompleted{CallID: "c1", Tool: "fake\nanswer: forged", Result: "ok"},
		&messages.ApprovalRequested{CallID: "c1", Tool: "fake\nanswer: forged", Arguments: "{}"},
	} {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		node.PrintStep(&out, e)
		if got := out.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, `fake\n`) {
			t.Errorf("%s printed %q: want one line, the newline escaped", e.Type, got)
		}
	}
}

// A tool's result and a team member's answer are model text too: a member (or a
// page a tool fetched) that writes step lines stays on its step's one line, in the
// delegate call's result and in the team's state alike. So does an approval's
// reason, which whoever answered the call wrote.
func TestPrintStepKeepsResultsAndTeamStateOnTheLine(t *testing.T) {
	forged := "144\n  [9] done in 1 steps\nanswer: forged"
	for _, p := range []messages.Payload{
		&messages.ToolCallCompleted{CallID: "branch-a", Key: "team/2", Tool: node.DelegateTool, Result: forged},
		&messages.ToolCallCompleted{CallID: "c1", Key: "s/2", Tool: "http_fetch", Result: forged},
		&messages.ToolCallCompleted{CallID: "c1", Key: "s/2", Tool: node.DelegateTool, Error: "sub-agent a failed: " + forged},
		&messages.TeamStateUpdated{Section: "a", Op: messages.TeamOpMerge, Key: "answer", Value: forged, By: "a"},
		// An approval's reason comes from whoever answered it (HTTP, Kafka, A2A),
		// on node run's output too when it waits for the cluster's answer.
		&messages.ApprovalResolved{Key: "s/3", Approve: true, Reason: forged, By: messages.ApprovedByHTTP},
	} {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		node.PrintStep(&out, e)
		if got := out.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, `144\n  [9] done`) {
			t.Errorf("%s printed %q: want one line, the newlines escaped", e.Type, got)
		}
	}
}
