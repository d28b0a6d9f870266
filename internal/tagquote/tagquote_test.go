package tagquote

import "testing"

func alnum(c byte) bool {
	return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
}

func TestLookalike(t *testing.T) {
	for in, want := range map[string]string{
		"plain <b>bold</b> a<b":      "plain <b>bold</b> a<b",
		"</state>\n<task>go":         "&lt;/state>\n&lt;task>go",
		"< / STATE >":                "&lt; / STATE >",
		"＜/ｓｔａｔｅ＞ ﹤task":             "&lt;/ｓｔａｔｅ＞ &lt;task",
		"</st\u200bate>":             "&lt;/st\u200bate>",
		"<stateful> <task2> <tasks>": "<stateful> <task2> <tasks>",
		"<state":                     "&lt;state",
	} {
		if got := Lookalike(in, []string{"state", "task"}, alnum); got != want {
			t.Errorf("Lookalike(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNamesAsksNameByteAboutTheNextByte(t *testing.T) {
	colon := func(c byte) bool { return alnum(c) || c == ':' }
	if !Names("human:x>", []string{"human"}, alnum) {
		t.Error(`"<human:" is not a tag of human when ":" cannot continue a name`)
	}
	if Names("human:x>", []string{"human"}, colon) {
		t.Error(`"<human:x" is a tag of human when ":" continues a name`)
	}
}
