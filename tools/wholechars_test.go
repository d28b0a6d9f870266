package tools_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
)

// A tool made WithWholeCharacters refuses arguments holding a \u escape of half a
// UTF-16 surrogate pair, alone or as a toolbox's operation, with an ArgumentError
// naming the escape and where it stands, before its function runs: decoded, the
// escape would reach the function as U+FFFD. A whole pair is the character.
func TestWithWholeCharacters(t *testing.T) {
	type noteArgs struct {
		Text string `json:"text"`
	}
	var got []string
	note := func(_ context.Context, a noteArgs) (string, error) {
		got = append(got, a.Text)
		return "ok", nil
	}
	fn, err := tools.Func("note", "Keeps a note.", note, tools.WithWholeCharacters())
	if err != nil {
		t.Fatal(err)
	}
	box, err := tools.NewToolbox("notes", "Notes.", tools.Sub("add", "Keeps a note.", note, tools.WithWholeCharacters()))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tool tools.Tool
		args string
		want string
	}{
		{fn, `{"text":"smile \ud83d"}`, `\ud83d`},
		{fn, `{"text":"\uDE00 alone"}`, `\uDE00`},
		{box, `{"op":"add","args":{"text":"smile \ud83dx"}}`, `\ud83d`},
	} {
		_, err := c.tool.Call(context.Background(), tools.Call{Key: "k", Arguments: c.args})
		var ae *tools.ArgumentError
		if !errors.Is(err, tools.ErrInvalidArguments) || !errors.As(err, &ae) || !strings.Contains(err.Error(), c.want) || ae.Pos == 0 {
			t.Errorf("%s: %v; want an ArgumentError naming %s and its position", c.args, err, c.want)
		}
	}
	if len(got) != 0 {
		t.Fatalf("the function ran with %q", got)
	}
	for _, c := range []struct {
		tool tools.Tool
		args string
	}{{fn, `{"text":"smile \ud83d\ude00"}`}, {box, `{"op":"add","args":{"text":"smile \ud83d\ude00"}}`}} {
		if _, err := c.tool.Call(context.Background(), tools.Call{Key: "k", Arguments: c.args}); err != nil {
			t.Fatalf("%s: %v", c.args, err)
		}
	}
	if len(got) != 2 || got[0] != "smile 😀" || got[1] != "smile 😀" {
		t.Errorf("the function got %q; want the whole emoji twice", got)
	}
}

// A string of the arguments that the parser reads as the object or array its
// schema wants (a model writing a toolbox's args, or an object field, as a JSON
// string) is JSON decoded too: a \u escape of half a surrogate pair in it is
// refused as in the arguments themselves. Before, it passed (the escape written
// with its backslash escaped in the arguments' text) and reached the function as
// U+FFFD. A string field holding such text is passed as written, the escape
// and all.
func TestWithWholeCharactersInAStringReadAsJSON(t *testing.T) {
	type noteArgs struct {
		Text string         `json:"text"`
		Meta map[string]any `json:"meta,omitempty"`
	}
	var got []string
	note := func(_ context.Context, a noteArgs) (string, error) {
		s, _ := a.Meta["k"].(string)
		got = append(got, a.Text+"|"+s)
		return "ok", nil
	}
	fn, err := tools.Func("note", "Keeps a note.", note, tools.WithWholeCharacters())
	if err != nil {
		t.Fatal(err)
	}
	box, err := tools.NewToolbox("notes", "Notes.", tools.Sub("add", "Keeps a note.", note, tools.WithWholeCharacters()))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tool        tools.Tool
		args, field string
	}{
		{box, `{"op":"add","args":"{\"text\":\"smile \\ud83d\"}"}`, "args"},
		{box, `{"op":"add","args":{"text":"x","meta":"{\"k\":\"\\udc00\"}"}}`, "meta"},
		{fn, `{"text":"x","meta":"{\"k\":\"\\ud83d!\"}"}`, "meta"},
		{fn, `{"text":"x","meta":"{\"k\":\"{\\\"j\\\":\\\"\\\\ud800\\\"}\"}"}`, ""},
	} {
		_, err := c.tool.Call(context.Background(), tools.Call{Key: "k", Arguments: c.args})
		var ae *tools.ArgumentError
		if c.field == "" {
			if err != nil {
				t.Errorf("%s: %v; want the escape passed as written", c.args, err)
			}
			continue
		}
		if !errors.Is(err, tools.ErrInvalidArguments) || !errors.As(err, &ae) || ae.Field != c.field || !strings.Contains(err.Error(), "surrogate") {
			t.Errorf("%s: %v; want an ArgumentError about the surrogate in %s", c.args, err, c.field)
		}
	}
	if len(got) != 1 || got[0] != `x|{"j":"\ud800"}` {
		t.Errorf("the function got %q; want one call, the escape in a string as written", got)
	}
	for _, c := range []struct {
		tool tools.Tool
		args string
	}{
		{box, `{"op":"add","args":"{\"text\":\"smile \\ud83d\\ude00\"}"}`},
		{fn, `{"text":"x","meta":"{\"k\":\"\\ud83d\\ude00 😀\"}"}`},
	} {
		if _, err := c.tool.Call(context.Background(), tools.Call{Key: "k", Arguments: c.args}); err != nil {
			t.Errorf("%s: %v", c.args, err)
		}
	}
}

// Arguments written as key=value pairs (the text protocol) are JSON decoded only
// in a double-quoted value and in a value read as an object or array: a \u escape
// of half a surrogate pair there is refused; in a bare value, passed on as it is
// written, it is text, and the call goes ahead. Before, the whole text was
// scanned as if it were JSON, and such a bare value was refused.
func TestWithWholeCharactersInPairs(t *testing.T) {
	type noteArgs struct {
		Text string         `json:"text"`
		Meta map[string]any `json:"meta,omitempty"`
	}
	var got []string
	note := func(_ context.Context, a noteArgs) (string, error) {
		got = append(got, a.Text)
		return "ok", nil
	}
	fn, err := tools.Func("note", "Keeps a note.", note, tools.WithWholeCharacters())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ args, field string }{
		{`text="smile \ud83d"`, "text"},
		{`text=x, meta={"k":"\udc00"}`, "meta"},
	} {
		_, err := fn.Call(context.Background(), tools.Call{Key: "k", Arguments: c.args})
		var ae *tools.ArgumentError
		if !errors.As(err, &ae) || ae.Field != c.field || !strings.Contains(err.Error(), "surrogate") {
			t.Errorf("%s: %v; want an ArgumentError about the surrogate in %s", c.args, err, c.field)
		}
	}
	for _, args := range []string{`text=C:\ud800\notes`, `text="smile \ud83d\ude00"`} {
		if _, err := fn.Call(context.Background(), tools.Call{Key: "k", Arguments: args}); err != nil {
			t.Errorf("%s: %v", args, err)
		}
	}
	if len(got) != 2 || got[0] != `C:\ud800\notes` || got[1] != "smile 😀" {
		t.Errorf("the function got %q", got)
	}
}
