package openai_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// The arguments of a tool call are streamed as the content is, in pieces of JSON
// strings: a character outside the Basic Multilingual Plane escaped as a surrogate
// pair ("\ud83d\ude00") may have its halves in two pieces of the same call. The
// halves are joined, in the call's arguments and in its increments, whatever
// pieces of other calls come between; a lone high half is still U+FFFD, given back
// by the chunk that finishes the choice when no piece of its call follows.
func TestStreamJoinsASurrogatePairSplitAcrossToolCallArguments(t *testing.T) {
	piece := func(index int, id, name, args string) string {
		c := openaitest.ToolCallChunk(index, id, name, args)
		c = strings.Replace(c, "HIGH", `\ud83d`, 1)
		return strings.Replace(c, "LOW", `\ude00`, 1)
	}
	type arg struct {
		index int
		text  string
	}
	for _, c := range []struct {
		name   string
		chunks []string
		want   []messages.ToolCall
		deltas []arg // the arguments increments
	}{
		{"split pair", []string{piece(0, "c1", "echo", `{"s":"aHIGH`), piece(0, "", "", `LOWb"}`)},
			[]messages.ToolCall{{ID: "c1", Name: "echo", Arguments: `{"s":"a😀b"}`}},
			[]arg{{0, `{"s":"a`}, {0, `😀b"}`}}},
		{"split pair, nothing else in the first piece", []string{piece(0, "c1", "echo", `{"s":"`), piece(0, "", "", `HIGH`), piece(0, "", "", `LOW"}`)},
			[]messages.ToolCall{{ID: "c1", Name: "echo", Arguments: `{"s":"😀"}`}},
			[]arg{{0, `{"s":"`}, {0, `😀"}`}}},
		{"another call between the halves", []string{
			piece(0, "c1", "echo", `{"s":"HIGH`), piece(1, "c2", "echo", `{"s":"HIGH`),
			piece(0, "", "", `LOW"}`), piece(1, "", "", `LOW!"}`)},
			[]messages.ToolCall{{ID: "c1", Name: "echo", Arguments: `{"s":"😀"}`}, {ID: "c2", Name: "echo", Arguments: `{"s":"😀!"}`}},
			[]arg{{0, `{"s":"`}, {1, `{"s":"`}, {0, `😀"}`}, {1, `😀!"}`}}},
		{"escaped backslash", []string{piece(0, "c1", "echo", `{"s":"\ud83d`), piece(0, "", "", `LOW"}`)},
			[]messages.ToolCall{{ID: "c1", Name: "echo", Arguments: `{"s":"\ud83d` + "\uFFFD" + `"}`}},
			[]arg{{0, `{"s":"\ud83d`}, {0, "\uFFFD" + `"}`}}},
		{"lone high half", []string{piece(0, "c1", "echo", `{"s":"HIGH`), piece(0, "", "", `b"}`)},
			[]messages.ToolCall{{ID: "c1", Name: "echo", Arguments: `{"s":"` + "\uFFFDb" + `"}`}},
			[]arg{{0, `{"s":"`}, {0, "\uFFFD" + `b"}`}}},
		{"lone high half at the end", []string{piece(0, "c1", "echo", `{"s":"HIGH`)},
			[]messages.ToolCall{{ID: "c1", Name: "echo", Arguments: `{"s":"` + "\uFFFD"}},
			[]arg{{0, `{"s":"`}, {0, "\uFFFD"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			events := append([]string{openaitest.RoleChunk()}, c.chunks...)
			events = append(events, openaitest.FinishChunk("tool_calls"), openaitest.Done)
			srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Stream(events...)))
			deltas, r, err := stream(t, newModel(t, srv))
			if err != nil || !reflect.DeepEqual(r.Message.ToolCalls, c.want) {
				t.Fatalf("calls %q, err %v: want %q", r.Message.ToolCalls, err, c.want)
			}
			var got []arg
			for _, d := range deltas {
				if d.ArgumentsDelta != "" {
					got = append(got, arg{d.ToolCallIndex, d.ArgumentsDelta})
				}
			}
			if !reflect.DeepEqual(got, c.deltas) {
				t.Fatalf("arguments increments %+v, want %+v", got, c.deltas)
			}
		})
	}
}

// A chunk may follow the one that finishes its choice (a proxy that sends its
// finish_reason early): a high half that ends the last piece of a call, or the
// last content, is U+FFFD in the answer and in the increments when the stream
// ends, and a pair split across two such chunks is joined.
func TestStreamGivesBackAHighHalfHeldWhenTheStreamEnds(t *testing.T) {
	halves := func(c string) string {
		c = strings.Replace(c, "HIGH", `\ud83d`, 1)
		return strings.Replace(c, "LOW", `\ude00`, 1)
	}
	for _, c := range []struct {
		name     string
		chunks   []string
		text     string
		calls    []messages.ToolCall
		streamed string // the content and arguments increments, joined
	}{
		{"content", []string{openaitest.ContentChunk("a"), openaitest.FinishChunk("stop"), halves(openaitest.ContentChunk("bHIGH"))},
			"ab\uFFFD", nil, "ab\uFFFD"},
		{"content, a pair", []string{openaitest.ContentChunk("a"), openaitest.FinishChunk("stop"), halves(openaitest.ContentChunk("bHIGH")), halves(openaitest.ContentChunk("LOW"))},
			"ab😀", nil, "ab😀"},
		{"arguments", []string{openaitest.ToolCallChunk(0, "c1", "echo", `{"s":"a`), openaitest.FinishChunk("tool_calls"), halves(openaitest.ToolCallChunk(0, "", "", `bHIGH`))},
			"", []messages.ToolCall{{ID: "c1", Name: "echo", Arguments: `{"s":"ab` + "\uFFFD"}}, `{"s":"ab` + "\uFFFD"},
	} {
		t.Run(c.name, func(t *testing.T) {
			events := append([]string{openaitest.RoleChunk()}, c.chunks...)
			srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Stream(append(events, openaitest.Done)...)))
			deltas, r, err := stream(t, newModel(t, srv))
			if err != nil || r.Message.Content != c.text || !reflect.DeepEqual(r.Message.ToolCalls, c.calls) {
				t.Fatalf("content %q, calls %q, err %v: want %q, %q", r.Message.Content, r.Message.ToolCalls, err, c.text, c.calls)
			}
			var streamed strings.Builder
			for _, d := range deltas {
				streamed.WriteString(d.Content + d.ArgumentsDelta)
			}
			if streamed.String() != c.streamed {
				t.Fatalf("increments %q, want %q", streamed.String(), c.streamed)
			}
		})
	}
}
