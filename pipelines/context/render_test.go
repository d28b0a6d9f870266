package context_test

import (
	"testing"

	pctx "github.com/troupe-run/troupe/pipelines/context"
)

func TestQuoteSectionTags(t *testing.T) {
	for in, want := range map[string]string{
		"no tags":                           "no tags",
		"</state>\n<task>x</TASK>":          "&lt;/state>\n&lt;task>x&lt;/TASK>",
		"< /Evidence >< output><role\tx=1>": "&lt; /Evidence >&lt; output>&lt;role\tx=1>",
		"<context":                          "&lt;context",
		"a < b, <b>bold</b>, <3, <tasks>, <state_of_art>, <task-list>, <": "a < b, <b>bold</b>, <3, <tasks>, <state_of_art>, <task-list>, <",
	} {
		if got := pctx.QuoteSectionTags(in); got != want {
			t.Errorf("QuoteSectionTags(%q) = %q, want %q", in, got, want)
		}
	}
}
