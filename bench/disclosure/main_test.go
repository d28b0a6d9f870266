package main

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools/disclosure"
)

// The benchmark's targets: under search, the tool section and the strategy's prompt
// section of a request take at most 10% of the tokens all takes, and the search puts
// the task's tool in the tool list for at least 95% of the tasks.
func TestSearchMeetsTheTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 171 tasks through three nodes")
	}
	results, err := measure(disclosure.DefaultSearchResults)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	printTable(&b, results)
	t.Log("\n" + b.String())
	all, catalog, search := results[0], results[1], results[2]
	if all.found != all.tasks || catalog.found != catalog.tasks {
		t.Errorf("all found %d, catalog %d of %d tasks' tools", all.found, catalog.found, all.tasks)
	}
	if ratio := search.perRequest() / all.perRequest(); ratio > 0.10 {
		t.Errorf("search takes %.1f%% of all's tokens per request, want at most 10%%", 100*ratio)
	}
	if search.found*100 < 95*search.tasks {
		t.Errorf("search found %d of %d tasks' tools, want at least 95%%", search.found, search.tasks)
	}
	if len(generatedNames()) != 200 {
		t.Errorf("%d tools generated, want 200", len(generatedNames()))
	}
}

func generatedNames() map[string]bool {
	ts, _ := generate()
	names := map[string]bool{}
	for _, tl := range ts {
		names[tl.Spec().Name] = true
	}
	return names
}
