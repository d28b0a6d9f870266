package skills

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// Names of the skill tools.
const (
	ToolLoadSkill = "load_skill"
	ToolReadFile  = "read_skill_file"
	ToolRunScript = "run_skill_script"
)

// Tools returns the tools that give a model levels 2 and 3 of the set's skills:
// load_skill, read_skill_file and run_skill_script (which answers ErrScriptsDisabled
// unless scripts are allowed). None when the set has no skills.
func (s *Set) Tools() []tools.Tool {
	if s == nil || len(s.skills) == 0 {
		return nil
	}
	return []tools.Tool{loadSkill{s}, readSkillFile{s}, runSkillScript{s}}
}

type loadSkill struct{ s *Set }
type readSkillFile struct{ s *Set }
type runSkillScript struct{ s *Set }

var (
	_ tools.Tool = loadSkill{}
	_ tools.Tool = readSkillFile{}
	_ tools.Tool = runSkillScript{}
)

// Source reports where the tools come from (tools list): the node itself.
func (loadSkill) Source() string      { return "builtin" }
func (readSkillFile) Source() string  { return "builtin" }
func (runSkillScript) Source() string { return "builtin" }

func (loadSkill) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: ToolLoadSkill,
		Description: "Loads a skill listed in the system prompt: returns its instructions and the files of its folder. Call it before acting on a task the skill matches.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","description":"The skill's name, as listed"}},"required":["name"],"additionalProperties":false}`)}
}

func (t loadSkill) Call(ctx context.Context, c tools.Call) (string, error) {
	var a struct {
		Name string `json:"name"`
	}
	if err := tools.DecodeArguments(t.Spec(), c.Arguments, &a); err != nil {
		return "", err
	}
	if a.Name == "" {
		return "", &tools.ArgumentError{Tool: ToolLoadSkill, Reason: `"name" is required, e.g. {"name": "pdf-forms"}`}
	}
	body, files, err := t.s.Body(a.Name)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Skill %s\n\n%s\n", a.Name, body)
	if len(files) > 0 {
		fmt.Fprintf(&b, "\nFiles of the skill's folder (read one with read_skill_file; run one of scripts/ with run_skill_script):\n")
		for _, f := range files {
			b.WriteString("- " + f + "\n")
		}
	}
	return b.String(), nil
}

func (readSkillFile) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: ToolReadFile,
		Description: "Reads a file of a skill's folder (e.g. references/guide.md) that its instructions refer to.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"skill":{"type":"string","description":"The skill's name"},` +
			`"path":{"type":"string","description":"The file's path relative to the skill's folder"}},"required":["skill","path"],"additionalProperties":false}`)}
}

func (t readSkillFile) Call(ctx context.Context, c tools.Call) (string, error) {
	var a struct {
		Skill string `json:"skill"`
		Path  string `json:"path"`
	}
	if err := tools.DecodeArguments(t.Spec(), c.Arguments, &a); err != nil {
		return "", err
	}
	if a.Skill == "" {
		return "", &tools.ArgumentError{Tool: ToolReadFile, Reason: `"skill" is required`}
	}
	return t.s.ReadFile(a.Skill, a.Path)
}

func (runSkillScript) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: ToolRunScript,
		Description: "Runs a script of a skill's scripts/ folder with the given arguments and returns its output. The node may not allow it.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"skill":{"type":"string","description":"The skill's name"},` +
			`"script":{"type":"string","description":"The script's path, e.g. scripts/fill.py"},` +
			`"args":{"type":"array","items":{"type":"string"},"description":"Command-line arguments"}},"required":["skill","script"],"additionalProperties":false}`)}
}

func (t runSkillScript) Call(ctx context.Context, c tools.Call) (string, error) {
	var a struct {
		Skill  string   `json:"skill"`
		Script string   `json:"script"`
		Args   []string `json:"args"`
	}
	if err := tools.DecodeArguments(t.Spec(), c.Arguments, &a); err != nil {
		return "", err
	}
	if a.Skill == "" {
		return "", &tools.ArgumentError{Tool: ToolRunScript, Reason: `"skill" is required`}
	}
	return t.s.RunScript(ctx, a.Skill, a.Script, a.Args)
}
