package openai_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// A character outside the Basic Multilingual Plane (an emoji) that a server writes
// as a UTF-16 surrogate pair of escapes, "\ud83d\ude00", may have its two halves in
// two chunks: each chunk is JSON of its own, where a lone half decodes as U+FFFD.
// The halves are joined: the answer, and the increments, hold the character. A
// lone half with no other half after it is still U+FFFD.
func TestStreamJoinsASurrogatePairSplitAcrossChunks(t *testing.T) {
	escaped := func(text, x, escape string) string {
		return strings.Replace(openaitest.ContentChunk(text), x, escape, 1)
	}
	u := messages.Usage{PromptTokens: 5, CompletionTokens: 3}
	for _, c := range []struct {
		name   string
		chunks []string
		want   string
		deltas []string
	}{
		{"split pair", []string{escaped("Smile X", "X", `\ud83d`), escaped("X!", "X", `\ude00`)}, "Smile 😀!", []string{"Smile ", "😀!"}},
		{"split pair, upper case", []string{escaped("X", "X", `\uD83D`), escaped("X", "X", `\uDE00`)}, "😀", []string{"😀"}},
		{"escaped backslash", []string{escaped("aX", "X", `\\ud83d`), escaped("X", "X", `\ude00`)}, `a\ud83d` + "\uFFFD", []string{`a\ud83d`, "\uFFFD"}},
		{"lone high half", []string{escaped("aX", "X", `\ud83d`), openaitest.ContentChunk("b")}, "a\uFFFDb", []string{"a", "\uFFFDb"}},
		{"lone high half at the end", []string{escaped("aX", "X", `\ud83d`)}, "a\uFFFD", []string{"a", "\uFFFD"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			events := append([]string{openaitest.RoleChunk()}, c.chunks...)
			events = append(events, openaitest.FinishChunk("stop"), openaitest.UsageChunk(u), openaitest.Done)
			srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Stream(events...)))
			deltas, r, err := stream(t, newModel(t, srv))
			if err != nil || r.Message.Content != c.want {
				t.Fatalf("%q %v: want %q", r.Message.Content, err, c.want)
			}
			var got []string
			for _, d := range deltas {
				got = append(got, d.Content)
			}
			if !reflect.DeepEqual(got, c.deltas) {
				t.Fatalf("deltas %q, want %q", got, c.deltas)
			}
		})
	}
}
