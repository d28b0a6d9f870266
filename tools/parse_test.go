package tools_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
)

// searchArgs exercises every kind of keyword the tags can set.
type searchArgs struct {
	Query  string   `json:"query" jsonschema:"what to look for" tool:"minLength=1,maxLength=200"`
	Limit  int      `json:"limit,omitempty" tool:"minimum=1,maximum=50"`
	Sort   string   `json:"sort,omitempty" tool:"enum=relevance|date"`
	Exact  bool     `json:"exact,omitempty"`
	Tags   []string `json:"tags,omitempty" tool:"maxItems=3"`
	Score  float64  `json:"score,omitempty"`
	Zip    string   `json:"zip,omitempty"`
	Filter *struct {
		Lang string `json:"lang" tool:"pattern=^[a-z]{2}$"`
	} `json:"filter,omitempty"`
}

func searchParser(t testing.TB) *tools.ArgumentParser {
	t.Helper()
	s, err := tools.SchemaFor[searchArgs]()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tools.NewArgumentParser("search", b, 0)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// argumentCases are the table of TestParseArguments and the seeds of
// FuzzParseArguments. want is the parsed arguments as JSON, or the error's field
// and words it must hold (err), separated by "|".
var argumentCases = []struct {
	name, in, want, field, err string
}{
	{name: "json", in: `{"query":"go actors","limit":3}`, want: `{"limit":3,"query":"go actors"}`},
	{name: "blank is {} (and query is missing)", in: "  ", field: "query", err: `missing the required field "query"`},
	{name: "null is {}", in: "null", field: "query", err: `missing the required field "query"`},
	{name: "integer from a string", in: `{"query":"q","limit":"3"}`, want: `{"limit":3,"query":"q"}`},
	{name: "integer from 3.0", in: `{"query":"q","limit":3.0}`, want: `{"limit":3,"query":"q"}`},
	{name: "number from a string", in: `{"query":"q","score":" 2.5 "}`, want: `{"query":"q","score":2.5}`},
	{name: "boolean from a string", in: `{"query":"q","exact":"TRUE"}`, want: `{"exact":true,"query":"q"}`},
	{name: "string from a number keeps its digits", in: `{"query":"q","zip":02134}`, field: "", err: "malformed JSON"},
	{name: "string from a number", in: `{"query":"q","zip":12345}`, want: `{"query":"q","zip":"12345"}`},
	{name: "string from a boolean", in: `{"query":true}`, want: `{"query":"true"}`},
	{name: "array from a string", in: `{"query":"q","tags":"[\"a\",\"b\"]"}`, want: `{"query":"q","tags":["a","b"]}`},
	{name: "object from a string", in: `{"query":"q","filter":"{\"lang\":\"en\"}"}`, want: `{"filter":{"lang":"en"},"query":"q"}`},
	{name: "key=value", in: `query=go actors, limit=3`, want: `{"limit":3,"query":"go actors"}`},
	{name: "key=value quoted with escapes", in: `query="say \"hi\", then\nleave", sort='date'`, want: `{"query":"say \"hi\", then\nleave","sort":"date"}`},
	{name: "key=value single quotes", in: `query='it\'s a \\ test'`, want: `{"query":"it's a \\ test"}`},
	{name: "key=value on lines, with colons", in: "query: q\nlimit: 2\nexact: false", want: `{"exact":false,"limit":2,"query":"q"}`},
	{name: "key=value array", in: `query=q, tags=["x", "y, z"]`, want: `{"query":"q","tags":["x","y, z"]}`},
	{name: "key=value twice", in: `query=a, query=b`, err: `"query" is given twice`},
	{name: "key=value unterminated", in: `query="abc`, err: "double-quoted"},
	{name: "not key=value", in: `hello world`, err: "neither a JSON object nor key=value pairs"},
	{name: "wrong type", in: `{"query":"q","limit":"three"}`, field: "limit", err: `"limit" must be an integer, not the string "three"`},
	{name: "fraction is no integer", in: `{"query":"q","limit":2.5}`, field: "limit", err: `"limit" must be an integer, not the number 2.5`},
	{name: "yes is no boolean", in: `{"query":"q","exact":"yes"}`, field: "exact", err: `"exact" must be true or false`},
	{name: "null is no string", in: `{"query":null}`, field: "query", err: `"query" must be a string, not null`},
	{name: "null for an optional field is its absence", in: `{"query":"q","limit":null,"filter":null}`, want: `{"query":"q"}`},
	{name: "object for a string", in: `{"query":{"a":1}}`, field: "query", err: `must be a string, not an object`},
	{name: "missing required", in: `{"limit":3}`, field: "query", err: `missing the required field "query"`},
	{name: "extra field", in: `{"query":"q","qeury":"x"}`, field: "qeury", err: `unknown field "qeury" (the fields are exact, filter, limit, query, score, sort, tags, zip)`},
	{name: "nested extra field", in: `{"query":"q","filter":{"lang":"en","x":1}}`, field: "filter.x", err: `unknown field "filter.x"`},
	{name: "nested missing", in: `{"query":"q","filter":{}}`, field: "filter.lang", err: `missing the required field "filter.lang"`},
	{name: "bad enum", in: `{"query":"q","sort":"size"}`, field: "sort", err: `"sort" must be one of "relevance", "date", not "size"`},
	{name: "below minimum", in: `{"query":"q","limit":0}`, field: "limit", err: `"limit" must be at least 1, not 0`},
	{name: "above maximum", in: `{"query":"q","limit":"51"}`, field: "limit", err: `"limit" must be at most 50, not 51`},
	{name: "too short", in: `{"query":""}`, field: "query", err: `"query" must be at least 1 characters long, not 0`},
	{name: "too many items", in: `{"query":"q","tags":["a","b","c","d"]}`, field: "tags", err: `"tags" must have at most 3 items, not 4`},
	{name: "item type", in: `{"query":"q","tags":["a",{}]}`, field: "tags[1]", err: `"tags[1]" must be a string, not an object`},
	{name: "pattern (the validator)", in: `{"query":"q","filter":{"lang":"english"}}`, err: `"filter.lang" does not match the schema: pattern`},
	// The validator quotes the value: a long one is clipped, so that the error keeps
	// what was expected, and stays short.
	{name: "pattern of a long value", in: `{"query":"q","filter":{"lang":"` + strings.Repeat("é", 30000) + `"}}`,
		err: `pattern: "` + strings.Repeat("é", 20) + `"… (60000 bytes) does not match regular expression "^[a-z]{2}$"`},
	{name: "several problems", in: `{"limit":"x","sort":1}`, field: "query", err: `missing the required field "query"; "limit" must be an integer`},
	{name: "array", in: `["q"]`, err: "the arguments are a JSON array; want a JSON object such as {\"query\": …}"},
	{name: "string", in: `"q"`, err: "a JSON string"},
	{name: "number", in: `42`, err: "a JSON number"},
	{name: "malformed", in: `{"query": "q",}`, err: "malformed JSON at byte"},
	{name: "truncated", in: `{"query": "q"`, err: "the text ends early"},
	{name: "trailing text", in: `{"query": "q"} {"x":1}`, err: "unexpected text after the JSON value"},
	{name: "duplicate key", in: `{"query":"a","query":"b"}`, err: `the key "query" appears twice`},
	{name: "huge number", in: `{"query":"q","score":1e999}`, field: "score", err: "too large"},
	{name: "deep nesting", in: `{"query":"q","filter":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, err: "deeper than 64 levels"},
	{name: "deep nesting in a string", in: `{"query":"q","tags":"` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `"}`, field: "tags", err: `"tags" must be an array, not the string`},
	{name: "10 MB string", in: `{"query":"` + strings.Repeat("x", 10<<20) + `"}`, err: "the arguments are 10485772 bytes long; the limit is 1048576"},
}

func TestParseArguments(t *testing.T) {
	p := searchParser(t)
	for _, tc := range argumentCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.ParseJSON(tc.in)
			if tc.err == "" {
				if err != nil {
					t.Fatalf("Parse(%.80q): %v", tc.in, err)
				}
				if string(got) != tc.want {
					t.Fatalf("Parse(%.80q) = %s, want %s", tc.in, got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse(%.80q) = %s, want an error with %q", tc.in, got, tc.err)
			}
			var ae *tools.ArgumentError
			if !errors.As(err, &ae) || !errors.Is(err, tools.ErrInvalidArguments) {
				t.Fatalf("error %v is not an *ArgumentError wrapping ErrInvalidArguments", err)
			}
			if !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), "search: invalid arguments: ") {
				t.Fatalf("error %q does not say %q", err, tc.err)
			}
			if tc.field != "" && ae.Field != tc.field {
				t.Fatalf("error %q names field %q, want %q", err, ae.Field, tc.field)
			}
			if len(err.Error()) > 2000 {
				t.Fatalf("error is %d bytes long: %.200s", len(err.Error()), err)
			}
		})
	}
}

// FuzzParseArguments checks that no argument text makes the parser panic, that what
// it accepts is a JSON object it accepts again unchanged, and that what it refuses
// is an *ArgumentError wrapping ErrInvalidArguments.
func FuzzParseArguments(f *testing.F) {
	for _, tc := range argumentCases {
		if len(tc.in) < 4096 {
			f.Add(tc.in)
		}
	}
	p := searchParser(f)
	f.Fuzz(func(t *testing.T, in string) {
		got, err := p.ParseJSON(in)
		if err != nil {
			var ae *tools.ArgumentError
			if !errors.As(err, &ae) || !errors.Is(err, tools.ErrInvalidArguments) {
				t.Fatalf("Parse(%q): error %v is not an *ArgumentError", in, err)
			}
			return
		}
		var obj map[string]any
		if err := json.Unmarshal(got, &obj); err != nil {
			t.Fatalf("Parse(%q) = %s, not a JSON object: %v", in, got, err)
		}
		again, err := p.ParseJSON(string(got))
		if err != nil || string(again) != string(got) {
			t.Fatalf("Parse(%q) = %s, which parses again as %s, %v", in, got, again, err)
		}
		_, _ = tools.ParsePairs(in)
	})
}

func TestParserRefusesSchemasItCannotUse(t *testing.T) {
	for schema, want := range map[string]string{
		`{"type":"array"}`:    `want "object"`,
		`{"type":`:            "not a JSON Schema",
		`{"$ref":"http://x"}`: "schema",
	} {
		if _, err := tools.NewArgumentParser("t", json.RawMessage(schema), 0); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewArgumentParser(%s) = %v, want an error with %q", schema, err, want)
		}
	}
	p, err := tools.NewArgumentParser("t", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.ParseJSON(`a=1, b="x"`); err != nil || string(got) != `{"a":"1","b":"x"}` {
		t.Fatalf("no schema: %s, %v", got, err)
	}
}

// A validator's message is clipped however its quoted values are escaped, and the
// parser's own messages clip what they quote of the model's (a field's name, a value).
func TestValidatorMessagesWithEscapedValues(t *testing.T) {
	p := searchParser(t)
	for _, in := range []string{`{"query":"q","` + strings.Repeat("k", 100_000) + `":1}`, `{"query":"q","limit":"` + strings.Repeat("9x", 50_000) + `"}`} {
		_, err := p.ParseJSON(in)
		if err == nil || len(err.Error()) > 400 {
			t.Errorf("%.40s…: an error of %d bytes: %.200v", in, len(fmt.Sprint(err)), err)
		}
	}
	for _, lang := range []string{strings.Repeat(`\u0000`, 30), strings.Repeat(`\"`, 50), strings.Repeat(`\\`, 41) + "x", strings.Repeat("🙂", 100)} {
		_, err := p.ParseJSON(`{"query":"q","filter":{"lang":"` + lang + `"}}`)
		if err == nil || !strings.Contains(err.Error(), `does not match regular expression "^[a-z]{2}$"`) || len(err.Error()) > 400 {
			t.Errorf("lang %.40s…: %v", lang, err)
		}
	}
}

// A call_tool call's arguments with a long unknown field: the error quotes its head.
func TestNamedCallErrorClipsTheField(t *testing.T) {
	_, err := tools.ParseNamedCall("call_tool", `{"name":"x","`+strings.Repeat("k", 100_000)+`":1}`)
	if err == nil || !strings.Contains(err.Error(), "unknown field") || len(err.Error()) > 400 {
		t.Errorf("an error of %d bytes: %.200v", len(fmt.Sprint(err)), err)
	}
}
