package tools_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
)

// anyOfChain is a schema whose field x is A0, where each Ai up to depth is an
// anyOf of two branches, the first a $ref to Ai+1 and the second (twice) the
// same $ref or (once) an integer, and A<depth> is a string.
func anyOfChain(depth int, twice bool) string {
	var defs []string
	for i := range depth {
		ref := fmt.Sprintf(`{"$ref":"#/$defs/A%d"}`, i+1)
		other := `{"type":"integer"}`
		if twice {
			other = ref
		}
		defs = append(defs, fmt.Sprintf(`"A%d":{"anyOf":[%s,%s]}`, i, ref, other))
	}
	defs = append(defs, fmt.Sprintf(`"A%d":{"type":"string"}`, depth))
	return `{"type":"object","$defs":{` + strings.Join(defs, ",") + `},"properties":{"x":{"$ref":"#/$defs/A0"}},"required":["x"]}`
}

// A schema whose anyOf branches share a $ref, level after level, is refused
// when the parser is made, saying why: the validator applies each branch to the
// value anew, so that 30 levels made a billion applications for one call's
// arguments (27 s at 20 levels), and a value that matched none (true for a
// string) went through them all. The count is memoized, made in time in
// proportion to the schema, and a chain whose levels do not share their $ref
// (an integer or the next level) is read as before, 30 levels and all.
func TestSchemaOfAnyOfBranchesSharingARefLevelAfterLevelIsRefused(t *testing.T) {
	for _, depth := range []int{20, 30, 200} {
		_, err := tools.NewArgumentParser("chain", json.RawMessage(anyOfChain(depth, true)), 0)
		if err == nil || !strings.Contains(err.Error(), "apply a schema more than 100000 times in checking one value") {
			t.Errorf("depth %d: %v; want the schema refused for the work it makes", depth, err)
		}
	}
	// Shared, but within the bound: read, and its arguments checked.
	p, err := tools.NewArgumentParser("chain", json.RawMessage(anyOfChain(8, true)), 0)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := p.ParseJSON(`{"x":"s"}`); err != nil || string(out) != `{"x":"s"}` {
		t.Errorf("8 levels shared: %s, %v", out, err)
	}
	p, err = tools.NewArgumentParser("chain", json.RawMessage(anyOfChain(30, false)), 0)
	if err != nil {
		t.Fatalf("30 levels not shared: %v", err)
	}
	for args, want := range map[string]string{`{"x":"s"}`: `{"x":"s"}`, `{"x":3}`: `{"x":3}`, `x=s`: `{"x":"s"}`} {
		if out, err := p.ParseJSON(args); err != nil || string(out) != want {
			t.Errorf("30 levels not shared, %s: %s, %v; want %s", args, out, err, want)
		}
	}
	if _, err := p.ParseJSON(`{"x":true}`); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Errorf("30 levels not shared, a boolean: %v; want an argument error", err)
	}
}

// Arguments nested deeper than a schema whose branches share a $ref through a
// value can check in reasonable time are refused, saying why, with the work
// counted up to its bound and no further: each level of the arguments doubled
// the validator's work (anyOf's branches are each applied anew), half a second
// at 14 levels, years at the 64 levels the parser reads. Nested less deeply, they are
// read.
func TestArgumentsNestedTooDeeplyForTheSchemasBranchesAreRefused(t *testing.T) {
	const branch = `{"type":"object","properties":{"x":{"$ref":"#/$defs/A"}}}`
	p, err := tools.NewArgumentParser("tree", json.RawMessage(`{"type":"object","$defs":{"A":{"anyOf":[`+branch+`,`+branch+`]}},"properties":{"x":{"$ref":"#/$defs/A"}}}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	nested := func(depth int, leaf string) string {
		return `{"x":` + strings.Repeat(`{"x":`, depth) + leaf + strings.Repeat(`}`, depth) + `}`
	}
	// 16 levels first: were they checked, 60 would not end.
	for _, args := range []string{nested(16, `{}`), nested(16, `1`), nested(60, `{}`)} {
		_, err := p.ParseJSON(args)
		if !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), "nested too deeply for the tool's schema") {
			t.Fatalf("%.40s…: %v; want the arguments refused for the work they make", args, err)
		}
		if _, err := p.Check(args); err == nil || !strings.Contains(err.Error(), "nested too deeply for the tool's schema") {
			t.Fatalf("Check %.40s…: %v; want the arguments refused for the work they make", args, err)
		}
	}
	if out, err := p.ParseJSON(nested(4, `{}`)); err != nil || string(out) != nested(4, `{}`) {
		t.Errorf("4 levels: %s, %v", out, err)
	}
	if _, err := p.ParseJSON(nested(4, `1`)); !errors.Is(err, tools.ErrInvalidArguments) || strings.Contains(err.Error(), "nested too deeply") {
		t.Errorf("4 levels, a number at the end: %v; want the validator's refusal", err)
	}
}

// webhookSchema is a schema of the form of GitHub's webhook payloads, as an
// OpenAPI description gives them: an event, one of variants of the same shape
// (an action, the repository with its owner and license, the sender, the
// organization, an issue with its user, labels, assignees and milestone), each
// a $ref to $defs shared by all.
func webhookSchema(variants int) string {
	fields := func(n int, prefix string) string {
		var f []string
		for i := range n {
			f = append(f, fmt.Sprintf(`"%s_%d":{"type":%q}`, prefix, i, []string{"string", "integer", "boolean"}[i%3]))
		}
		return strings.Join(f, ",")
	}
	nullable := func(def string) string { return `{"anyOf":[{"$ref":"#/$defs/` + def + `"},{"type":"null"}]}` }
	defs := []string{
		`"user":{"type":"object","properties":{` + fields(21, "user") + `}}`,
		`"license":{"type":"object","properties":{` + fields(6, "license") + `}}`,
		`"label":{"type":"object","properties":{` + fields(7, "label") + `}}`,
		`"milestone":{"type":"object","properties":{` + fields(16, "milestone") + `,"creator":` + nullable("user") + `}}`,
		`"repository":{"type":"object","properties":{` + fields(90, "repository") + `,"owner":{"$ref":"#/$defs/user"},"organization":` + nullable("user") +
			`,"license":` + nullable("license") + `}}`,
		`"issue":{"type":"object","properties":{` + fields(30, "issue") + `,"user":` + nullable("user") + `,"assignee":` + nullable("user") +
			`,"assignees":{"type":"array","items":{"$ref":"#/$defs/user"}},"labels":{"type":"array","items":{"anyOf":[{"type":"string"},{"$ref":"#/$defs/label"}]}}` +
			`,"milestone":` + nullable("milestone") + `,"repository":{"$ref":"#/$defs/repository"}}}`,
	}
	var events []string
	for i := range variants {
		events = append(events, fmt.Sprintf(`{"type":"object","properties":{"action":{"const":"action_%d"},"issue":{"$ref":"#/$defs/issue"},`+
			`"repository":{"$ref":"#/$defs/repository"},"sender":{"$ref":"#/$defs/user"},"organization":{"$ref":"#/$defs/user"}},"required":["action"]}`, i))
	}
	return `{"type":"object","$defs":{` + strings.Join(defs, ",") + `},"properties":{"event":{"anyOf":[` + strings.Join(events, ",") + `]}},"required":["event"]}`
}

// A large schema with no branches that share a $ref level after level is read,
// however many its fields: here 250 variants of a webhook's payload (63 KiB),
// each with a repository, an issue, their users. Counted for arguments holding
// one value of each field of every variant at once (the size of the schema with
// its $refs written out), it was refused as one that applies a schema more than
// 100000 times, "branches that share a $ref, level after level", which it has
// none of, while a payload (one variant) is checked in milliseconds.
func TestLargeSchemaOfManyVariantsIsRead(t *testing.T) {
	schema := webhookSchema(250)
	p, err := tools.NewArgumentParser("webhook", json.RawMessage(schema), 0)
	if err != nil {
		t.Fatalf("a %d KiB schema of 250 variants: %v", len(schema)>>10, err)
	}
	user := `{"user_0":"octocat","user_1":1,"user_2":false}`
	args := `{"event":{"action":"action_249","sender":` + user + `,"repository":{"repository_0":"hello","owner":` + user + `,"license":null},` +
		`"issue":{"issue_0":"a bug","user":` + user + `,"assignees":[` + user + `,` + user + `],"labels":["bug",{"label_0":"x"}],"milestone":null}}}`
	if _, err := p.ParseJSON(args); err != nil {
		t.Errorf("a payload: %v", err)
	}
	if _, err := p.ParseJSON(`{"event":{"action":"action_250"}}`); !errors.Is(err, tools.ErrInvalidArguments) {
		t.Errorf("an action of no variant: %v; want an argument error", err)
	}
}

// Arguments that are not deep but hold too many values for a schema of many
// variants (here 250 of a webhook's payload, each applied to the payload) are
// refused for the work their check would make, saying so: the refusal said
// they were nested too deeply and asked for them nested less deeply, which
// these could not be.
func TestArgumentsWithTooManyValuesForTheSchemasBranchesAreRefusedSayingSo(t *testing.T) {
	p, err := tools.NewArgumentParser("webhook", json.RawMessage(webhookSchema(250)), 0)
	if err != nil {
		t.Fatal(err)
	}
	user := `{"user_0":"octocat","user_1":1,"user_2":false}`
	args := `{"event":{"action":"action_249","issue":{"assignees":[` + strings.TrimSuffix(strings.Repeat(user+",", 200), ",") + `]}}}`
	_, err = p.ParseJSON(args)
	if !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), "more than 100000 times") {
		t.Fatalf("200 assignees: %v; want the arguments refused for the work they make", err)
	}
	if !strings.Contains(err.Error(), "hold too many values") || !strings.Contains(err.Error(), "send fewer values") {
		t.Errorf("200 assignees: %v; want it to say the arguments hold too many values, not only that they are nested too deeply", err)
	}
}
