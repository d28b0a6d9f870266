package skills_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/troupe-run/troupe/tools/skills"
)

// A front matter's "---" lines with blanks after them (an editor that keeps
// trailing spaces, a copy from a web page) are the delimiters they look like:
// the skill was skipped with "no front matter: the file must begin with a line
// \"---\"", of a file that begins with one.
func TestFrontMatterDelimitersWithTrailingBlanks(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"spaces": "--- \nname: spaces\ndescription: Opens with a space after the dashes.\n---  \nThe body.\n",
		"tab":    "---\t\r\nname: tab\r\ndescription: Closes with a tab after the dashes.\r\n---\t\r\nThe body.\r\n",
		"eof":    "---\nname: eof\ndescription: Ends at the closing line.\n--- ",
	} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, skills.FileName), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set, problems, err := skills.Load(skills.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("problem: %v", p)
	}
	for _, name := range []string{"spaces", "tab"} {
		body, _, err := set.Body(name)
		if err != nil || body != "The body." {
			t.Errorf("%s: body %q, %v; want \"The body.\"", name, body, err)
		}
	}
	// A line that only begins with dashes is no delimiter.
	if err := os.WriteFile(filepath.Join(dir, "spaces", skills.FileName), []byte("--- x\nname: spaces\ndescription: d\n---\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := set.Body("spaces"); err == nil {
		t.Error(`"--- x" taken for a delimiter`)
	}
}
