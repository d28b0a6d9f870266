package rag

import (
	"fmt"
	"strings"

	"github.com/JohannesKaufmann/html-to-markdown/v2/converter"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/base"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/commonmark"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/table"
	"golang.org/x/net/html"
)

// convertHTML converts HTML to Markdown with html-to-markdown, its tables kept as
// Markdown tables. The document is parsed first to refuse nesting deeper than
// MaxHTMLDepth, which the converter would otherwise recurse into.
func convertHTML(text string) (string, error) {
	doc, err := html.Parse(strings.NewReader(text))
	if err != nil && strings.Contains(err.Error(), "exceeds") {
		// x/net/html refuses a stack of open elements deeper than it allows.
		return "", fmt.Errorf("HTML nested too deep: %w: %w", ErrTooLarge, err)
	}
	if err != nil {
		return "", fmt.Errorf("HTML: %w: %w", ErrMalformed, err)
	}
	if d := htmlDepth(doc, MaxHTMLDepth); d > MaxHTMLDepth {
		return "", fmt.Errorf("HTML nested deeper than %d elements: %w", MaxHTMLDepth, ErrTooLarge)
	}
	conv := converter.NewConverter(converter.WithPlugins(
		base.NewBasePlugin(),
		commonmark.NewCommonmarkPlugin(),
		table.NewTablePlugin(),
	))
	md, err := conv.ConvertNode(doc)
	if err != nil {
		return "", fmt.Errorf("HTML: %w: %w", ErrMalformed, err)
	}
	return normalizeNewlines(string(md)), nil
}

// htmlDepth returns the depth of the deepest node under n, walking without
// recursion, and stops early once the depth passes limit.
func htmlDepth(n *html.Node, limit int) int {
	type frame struct {
		n     *html.Node
		depth int
	}
	deepest := 0
	stack := []frame{{n, 0}}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if f.depth > deepest {
			deepest = f.depth
			if deepest > limit {
				return deepest
			}
		}
		for c := f.n.FirstChild; c != nil; c = c.NextSibling {
			stack = append(stack, frame{c, f.depth + 1})
		}
	}
	return deepest
}
