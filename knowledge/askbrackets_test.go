package knowledge_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/knowledge"
)

// A label may hold brackets: a changelog's headings are "## [1.2.0] - 2024-05-01"
// (Keep a Changelog), a file may be named "notes[draft].md". A model that cites
// such a passage exactly as asked ("[CHANGELOG.md > # Changelog > ## [1.2.0] -
// 2024-05-01]") cited it: its answer must be kept with that citation, not marked
// "(not in the evidence)" and replaced by an extractive one.
func TestAskCitesALabelWithBrackets(t *testing.T) {
	const changelog = "# Changelog\n\n## [1.2.0] - 2024-05-01\n\nThe upload limit rose to 64 MiB.\n\n## [1.1.0] - 2024-03-01\n\nThe node learned to serve HTTP.\n"
	answer := "The upload limit is 64 MiB since 1.2.0 [CHANGELOG.md > # Changelog > ## [1.2.0] - 2024-05-01]; " +
		"drafts say so too [notes[draft].md]."
	model := scripted(t, "x", "y", answer)
	f := newFixture(t, func(c *knowledge.Config) { c.Model = model })
	b := f.base(t, "office")
	addText(t, b, "CHANGELOG.md", changelog)
	addText(t, b, "notes[draft].md", "# Draft\n\nUploads up to 64 MiB are accepted, the draft says.")
	ans, err := b.Ask(testCtx(t), "What is the upload limit?", knowledge.AskOptions{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if ans.Extractive || len(ans.Unverified) != 0 || strings.Contains(ans.Text, "not in the evidence") {
		t.Fatalf("the model's answer was not kept as cited: extractive %v, unverified %q, text %q", ans.Extractive, ans.Unverified, ans.Text)
	}
	got := map[string]bool{}
	for _, c := range ans.Citations {
		got[c.Source+" > "+c.HeadingPath] = true
	}
	if !got["CHANGELOG.md > # Changelog > ## [1.2.0] - 2024-05-01"] || !got["notes[draft].md > # Draft"] {
		t.Errorf("citations %+v", ans.Citations)
	}
	if ans.Text != answer {
		t.Errorf("text %q, want the answer as written", ans.Text)
	}
}
