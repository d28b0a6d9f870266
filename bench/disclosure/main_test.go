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
	results, err := measure(disclosure.DefaultSearchResults, false)
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
	for _, r := range results {
		if r.called != r.found {
			t.Errorf("%s: %d tools found, %d answered", r.strategy, r.found, r.called)
		}
	}
	if ratio := search.perRequest() / all.perRequest(); ratio > 0.10 {
		t.Errorf("search takes %.1f%% of all's tokens per request, want at most 10%%", 100*ratio)
	}
	if search.found*100 < 95*search.tasks {
		t.Errorf("search found %d of %d tasks' tools, want at least 95%%", search.found, search.tasks)
	}
	if g := generate(); g.count != 200 || len(g.servers) != 7 {
		t.Errorf("%d tools over %d servers generated, want 200 over 7", g.count, len(g.servers))
	}
}
