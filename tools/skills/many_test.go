package skills_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools/skills"
)

// manySkills builds a skills directory of n skills with long descriptions.
func manySkills(t *testing.T, n int) string {
	dir := t.TempDir()
	for i := range n {
		name := fmt.Sprintf("skill-%04d", i)
		desc := fmt.Sprintf("Handles topic%04d tasks. %s", i, strings.Repeat("Long words about it. ", 45))
		write(t, dir, name+"/SKILL.md", "---\nname: "+name+"\ndescription: "+desc+"\n---\nBody of "+name+".\n", 0o644)
	}
	return dir
}

// Level 1 stays bounded however many skills there are, and a skill it leaves out is
// found through load_skill: asked for a word of its description, it names it.
func TestPromptSectionIsBoundedAmongThousandsOfSkills(t *testing.T) {
	for _, n := range []int{40, 300, 3000} {
		set, problems := load(t, skills.Config{Dir: manySkills(t, n)})
		if len(problems) > 0 || len(set.Skills()) != n {
			t.Fatalf("%d skills: loaded %d, problems %v", n, len(set.Skills()), problems)
		}
		section := set.PromptSection()
		if len(section) > 16<<10 { // skills.MaxPromptSection
			t.Fatalf("%d skills: the section has %d bytes, over %d", n, len(section), 16<<10)
		}
		if set.PromptSection() != section {
			t.Fatalf("%d skills: the section is not stable", n)
		}
		if !strings.Contains(section, "- skill-0000") {
			t.Fatalf("%d skills: the first skill is not listed:\n%s", n, section[:200])
		}
		last := fmt.Sprintf("skill-%04d", n-1)
		_, err := call(t, toolNamed(t, set, skills.ToolLoadSkill), `{"name": "topic`+last[6:]+`"}`)
		if err == nil || !strings.Contains(err.Error(), last) {
			t.Fatalf("%d skills: load_skill of a word of %s's description: %v", n, last, err)
		}
		if len(err.Error()) > 4<<10 {
			t.Fatalf("%d skills: the error has %d bytes", n, len(err.Error()))
		}
		t.Logf("%d skills: %d bytes; %s", n, len(section), err)
	}
}
