package skills_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools/skills"
)

// SKILL.md must be UTF-8 text, but YAML's !!binary tag decodes base64 into any
// bytes: a description written "!!binary RmlsbHMgZm9ybXMg//7AIGRvbmU=" loaded as
// "Fills forms \xff\xfe\xc0 done", bytes that are not UTF-8, into the system
// prompt of every request (and the MCP server's prompts). It is refused as a
// description that is not plain text.
func TestDescriptionThatIsNotUTF8IsRefused(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "bad/SKILL.md", "---\nname: bad\ndescription: !!binary RmlsbHMgZm9ybXMg//7AIGRvbmU=\n---\nbody\n", 0o644)
	set, problems := load(t, skills.Config{Dir: dir})
	if len(set.Skills()) != 0 || len(problems) != 1 || !strings.Contains(problems[0].Error(), "UTF-8") {
		t.Fatalf("skills %q, problems %v", set.Skills(), problems)
	}
	// A !!binary description that decodes to plain text is plain text.
	write(t, dir, "good/SKILL.md", "---\nname: good\ndescription: !!binary RmlsbHMgZm9ybXMu\n---\nbody\n", 0o644)
	if set, _ := load(t, skills.Config{Dir: dir}); len(set.Skills()) != 1 || set.Skills()[0].Description != "Fills forms." {
		t.Fatalf("skills %q", set.Skills())
	}
}
