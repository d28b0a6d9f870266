package tools_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// PriorSpecs gives the files tool as builds before f4b1e23 described it, collapsed
// and expanded, and leaves the other tools and the specs given as they are.
func TestPriorSpecsOfTheFilesTool(t *testing.T) {
	box, err := tools.NewFiles(tools.FilesConfig{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	const now, before = "directories ending in /; a name that is not plain printable text is quoted.", "directories ending in /."
	calc := tools.Calculator{}.Spec()
	for _, specs := range [][]messages.ToolSpec{
		{calc, box.Spec()},
		func() []messages.ToolSpec {
			out := []messages.ToolSpec{calc}
			for _, tool := range box.Expand() {
				out = append(out, tool.Spec())
			}
			return out
		}(),
	} {
		given := append([]messages.ToolSpec(nil), specs...)
		prior := tools.PriorSpecs(specs)
		if len(prior) != 1 || len(prior[0]) != len(specs) {
			t.Fatalf("PriorSpecs(%d specs) = %d lists, want 1 of %d", len(specs), len(prior), len(specs))
		}
		rewritten := 0
		for i, s := range prior[0] {
			if s.Description != specs[i].Description {
				rewritten++
				if !strings.Contains(specs[i].Description, now) || strings.Contains(s.Description, now) || !strings.Contains(s.Description, before) {
					t.Errorf("%s described before as %q", s.Name, s.Description)
				}
			}
		}
		if rewritten != 1 || prior[0][0].Description != calc.Description {
			t.Errorf("%d descriptions rewritten, want the files list's only", rewritten)
		}
		for i := range specs {
			if specs[i].Description != given[i].Description {
				t.Fatalf("PriorSpecs changed the specs given")
			}
		}
	}
	if prior := tools.PriorSpecs([]messages.ToolSpec{calc}); prior != nil {
		t.Errorf("PriorSpecs of the calculator = %v, want nil", prior)
	}
}
