package rag_test

import (
	"fmt"
	"strings"

	"github.com/troupe-run/troupe/pipelines/rag"
)

// An ingestion run converts a document, splits it into paragraphs under their
// headings and packs them into chunks to embed, keyed by the document's hash.
func Example() {
	doc := []byte(`<h1>Guide</h1><p>Troupe runs agents.</p>
<h2>Install</h2><p>Download the binary. Put it on your PATH.</p>
<table><tr><th>OS</th><th>File</th></tr><tr><td>Linux</td><td>troupe.tar.gz</td></tr></table>`)
	md, err := rag.Convert("guide.html", doc)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("document", rag.DocumentHash(doc)[:12])
	chunks := rag.Pack(rag.Split(md), rag.ChunkOptions{MaxTokens: 30, OverlapTokens: -1})
	for _, c := range chunks {
		fmt.Printf("%s [%d,%d) %d tokens: %q\n", strings.Join(c.HeadingPath, " > "), c.Start, c.End, c.Tokens, c.Text)
	}
	// Output:
	// document c55b2670d318
	// # Guide [9,28) 5 tokens: "Troupe runs agents."
	// # Guide > ## Install [42,83) 10 tokens: "Download the binary. Put it on your PATH."
	// # Guide > ## Install [85,162) 20 tokens: "| OS    | File          |\n|-------|---------------|\n| Linux | troupe.tar.gz |"
}
