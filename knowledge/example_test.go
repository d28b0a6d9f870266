package knowledge_test

import (
	"context"
	"fmt"
	"os"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/vectorstore"
)

// A knowledge base on an embedded node: the SQLite event log and the in-process
// vector store, the offline hashing embedder and no language model, so Ask answers
// by quotation.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "kb-example")
	defer os.RemoveAll(dir)
	log, _ := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	defer log.Close()
	store, _ := vectorstore.Open(vectorstore.Config{})
	defer store.Close()

	bases, err := knowledge.Open(knowledge.Config{Log: log, Vectors: store})
	if err != nil {
		panic(err)
	}
	docs, _ := bases.Base(ctx, "handbook")
	r, _ := docs.AddText(ctx, "office.md", "# Office\n\n## Parking\n\nVisitors park in garage B. The barrier opens with the intercom.\n\n## Lunch\n\nThe canteen serves lunch from noon to two.", "")
	fmt.Println(r.Status, r.Chunks, "chunks")
	r, _ = docs.AddText(ctx, "office.md", "# Office\n\n## Parking\n\nVisitors park in garage B. The barrier opens with the intercom.\n\n## Lunch\n\nThe canteen serves lunch from noon to two.", "")
	fmt.Println(r.Status)

	res, _ := docs.Search(ctx, knowledge.Query{Text: "where do visitors park", MultiQuery: 2})
	fmt.Println(res.Hits[0].Label())
	fmt.Println(res.Notes[0])

	ans, _ := docs.Ask(ctx, "Where do visitors park?", knowledge.AskOptions{})
	fmt.Println(ans.Text)
	ans, _ = docs.Ask(ctx, "When is lunch served?", knowledge.AskOptions{})
	fmt.Println(ans.Citations[0].Source, ">", ans.Citations[0].HeadingPath)
	// Output:
	// added 2 chunks
	// unchanged
	// office.md > # Office > ## Parking
	// multi-query expansion is off: no language model is configured
	// Extractive answer (quoted from the knowledge base, not written by a language model):
	//
	// - Visitors park in garage B. [office.md > # Office > ## Parking]
	// office.md > # Office > ## Lunch
}
