package skills_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/skills"
)

// The skills' tools read their arguments as every tool's are read: a wrong type
// or a key written twice is an error naming the field, not the decoder's words
// about Go struct fields, nor the last of two keys taken.
func TestSkillToolsReadArgumentsAsEveryToolDoes(t *testing.T) {
	set, _ := load(t, skills.Config{Dir: skillsDir(t), AllowScripts: true})
	for _, c := range []struct{ tool, args, want string }{
		{skills.ToolLoadSkill, `{"name":["pdf-forms"]}`, `"name" must be a string`},
		{skills.ToolLoadSkill, `{"name":"alpha","name":"pdf-forms"}`, `the key "name" appears twice`},
		{skills.ToolReadFile, `{"skill":{"a":1},"path":"references/fields.md"}`, `"skill" must be a string`},
		{skills.ToolRunScript, `{"skill":"pdf-forms","script":["scripts/hello.sh"]}`, `"script" must be a string`},
		{skills.ToolRunScript, `{"skill":"pdf-forms","script":"scripts/hello.sh","args":"x"}`, `"args" must be an array`},
	} {
		out, err := call(t, toolNamed(t, set, c.tool), c.args)
		if !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "Go struct") {
			t.Errorf("%s(%s): %q, %v; want an error saying %s", c.tool, c.args, out, err, c.want)
		}
	}
	if out, err := call(t, toolNamed(t, set, skills.ToolLoadSkill), `{"name":"pdf-forms"}`); err != nil || !strings.Contains(out, "# Skill pdf-forms") {
		t.Errorf("load_skill pdf-forms: %q, %v", out, err)
	}
}
