package skills_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools/skills"
)

// A SKILL.md whose front matter is not valid YAML is reported at the line of the
// file, on one line: the parser counted from the line after "---", so "line 2"
// sent the author one line above the mistake, and its "unmarshal errors:" came
// on lines of their own. A skill folder that is a symbolic link to nothing (the
// skill moved) or to itself is reported, not skipped without a word.
func TestSkillProblemsNameTheFilesLine(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, skills.FileName), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("twice", "---\nname: twice\nname: twice\ndescription: d\n---\nbody\n")
	write("amap", "---\nname: amap\n\ndescription: {a: 1}\n---\nbody\n")
	write("tab", "---\nname: tab\n\tdescription: d\n---\nbody\n")
	for _, link := range []struct{ name, to string }{{"moved", filepath.Join(dir, "nowhere")}, {"self", filepath.Join(dir, "self")}} {
		if err := os.Symlink(link.to, filepath.Join(dir, link.name)); err != nil {
			t.Fatal(err)
		}
	}
	_, problems, err := skills.Load(skills.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range problems {
		msg := p.Error()
		if strings.Contains(msg, "\n") {
			t.Errorf("a problem on more than one line: %q", msg)
		}
		for _, name := range []string{"twice", "amap", "tab", "moved", "self"} {
			if strings.Contains(msg, filepath.Join(dir, name)) {
				got[name] = msg
			}
		}
	}
	for name, want := range map[string]string{
		"twice": `line 3: mapping key "name" already defined at line 2`,
		"amap":  "line 4: cannot unmarshal !!map into string",
		"tab":   "line 3: found a tab character",
		"moved": "symbolic link",
		"self":  "symbolic link",
	} {
		if !strings.Contains(got[name], want) {
			t.Errorf("%s: %q; want …%s…", name, got[name], want)
		}
	}
}
