package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
)

// A model call cut by the model timeout after its request went out counts an
// estimate of its prompt's tokens, as the provider bills them: node run's line of
// the failed call says so (it said 0+0 tokens, the spend lost between the
// gateway and the session, so that the task's token and cost budgets never saw it).
func TestModelTimeoutCountsThePromptSent(t *testing.T) {
	_, gone, _ := holdingProvider(t)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--data", t.TempDir(), "--stream", "off", "--model-timeout", "300ms", "held question"}, &out, &errb, options{})
	if code == 0 {
		t.Fatalf("exit 0, want a failed task\n%s%s", out.String(), errb.String())
	}
	receive(t, gone, "the held request to be abandoned")
	m := regexp.MustCompile(`model call timed out after 300ms \((\d+)\+(\d+) tokens`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no line of the timed-out call with its tokens:\n%s%s", out.String(), errb.String())
	}
	if m[1] == "0" {
		t.Fatalf("the timed-out call counts %s prompt tokens, want an estimate of the prompt sent:\n%s", m[1], out.String())
	}
}
