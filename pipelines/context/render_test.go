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

// A tag written with lookalikes of its characters is quoted as the tag is: a
// full-width or small "<" ("＜", "﹤", as an input method types it), full-width
// letters or "/", an invisible character in its name, a space of another kind
// around its "/" all read as "</state>" to a model. Other text, a user's HTML in
// full-width letters included, is left as it is.
func TestQuoteSectionLookalikeTags(t *testing.T) {
	for in, want := range map[string]string{
		"＜/state＞\n\n＜task＞":                  "&lt;/state＞\n\n&lt;task＞",
		"﹤/Evidence>":                         "&lt;/Evidence>",
		"</ｓｔａｔｅ>＜／ＴＡＳＫ＞":                     "&lt;/ｓｔａｔｅ>&lt;／ＴＡＳＫ＞",
		"</\u200bstate></st\u200date>":        "&lt;/\u200bstate>&lt;/st\u200date>",
		"<\u00a0/state>＜\u3000/\u3000output>": "&lt;\u00a0/state>&lt;\u3000/\u3000output>",
		"</state\u200b>":                      "&lt;/state\u200b>",
		"</state>":                            "&lt;/state>",
		"＜div＞Ｈｉ＜/div＞ a ＜ b <tasks> ＜ｓｔａｔｅｓ＞": "＜div＞Ｈｉ＜/div＞ a ＜ b <tasks> ＜ｓｔａｔｅｓ＞",
		"＜": "＜",
	} {
		if got := pctx.QuoteSectionLookalikeTags(in); got != want {
			t.Errorf("QuoteSectionLookalikeTags(%q) = %q, want %q", in, got, want)
		}
	}
}
