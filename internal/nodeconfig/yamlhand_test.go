package nodeconfig

import (
	"strings"
	"testing"
)

// Hand-written YAML the agents file read past or misread without a word: a second
// document that is not valid YAML (the check for one document only looked at a
// valid one), a route mapping with a key twice (the last won, so the task went to
// the second member), a null taken for the text "~", and YAML aliases, refused as
// "want a string" (or a merge key as an unknown field "<<") although the value the
// alias names is a string.
func TestAgentsFileHandWrittenYAML(t *testing.T) {
	for _, c := range []struct {
		name, file string
		line       int
		want       string
	}{
		{"bad second document", "agents:\n  a:\n    description: x\n---\nagents:\n\t b: [\n", 6, "a second YAML document, not valid YAML"},
		{"route key twice", "agents:\n  w: {}\n  c: {}\nteams:\n  t:\n    pattern: orchestrator\n    members: [w, c]\n    fallback: w\n    routes:\n      - {match: x,\n         member: w, member: c}\n",
			11, `route 1: field "member" is given twice`},
		{"route null", "agents:\n  w: {}\nteams:\n  t:\n    pattern: orchestrator\n    members: [w]\n    fallback: w\n    routes:\n      - {match: ~, member: w}\n", 9, "route 1: match: want a non-empty string"},
		{"check null", "agents:\n  w: {}\nteams:\n  t:\n    pattern: orchestrator\n    members: [w]\n    fallback: w\n    check: {regex: ~}\n", 8, "check: want"},
		{"alias", "agents:\n  a:\n    system_prompt: &p hello\n  b:\n    system_prompt: *p\n", 5, "alias *p: an agents file has no anchors nor aliases"},
		{"merge key", "agents:\n  a: &b\n    max_steps: 3\n  b:\n    <<: *b\n", 5, "alias *b: an agents file has no anchors nor aliases"},
	} {
		_, err := ParseAgents("agents.yaml", []byte(c.file))
		ae, ok := err.(*AgentsFileError)
		if !ok || ae.Line != c.line || !strings.Contains(ae.Msg, c.want) {
			t.Errorf("%s: %v; want line %d: …%s…", c.name, err, c.line, c.want)
		}
	}
}

// A "---" that ends the file (as some editors and generators write it), with at
// most comments after it, is an empty document: the file is read, not refused as
// a second document; a second document with anything in it (an explicit null
// too) still is.
func TestAgentsFileWithATrailingDocumentMarker(t *testing.T) {
	for _, file := range []string{
		"agents:\n  a:\n    description: x\n---\n",
		"---\nagents:\n  a:\n    description: x\n---\n# end\n",
		"agents:\n  a:\n    description: x\n--- \n\n---\n",
	} {
		f, err := ParseAgents("agents.yaml", []byte(file))
		if err != nil || len(f.Agents) != 1 {
			t.Errorf("%q: %v, %d agents; want the one agent read", file, err, len(f.Agents))
		}
	}
	for _, file := range []string{
		"agents:\n  a:\n    description: x\n---\nnull\n",
		"agents:\n  a:\n    description: x\n---\n---\nagents: {}\n",
	} {
		if _, err := ParseAgents("agents.yaml", []byte(file)); err == nil || !strings.Contains(err.Error(), "a second YAML document") {
			t.Errorf("%q: %v; want a second document refused", file, err)
		}
	}
}
