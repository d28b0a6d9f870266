package rag

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/JohannesKaufmann/html-to-markdown/v2/converter"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/base"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/commonmark"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/table"
	"golang.org/x/net/html"
)

// convertHTML converts HTML to Markdown with html-to-markdown, its tables kept as
// Markdown tables. The document is parsed first to refuse nesting deeper than
// MaxHTMLDepth, which the converter would otherwise recurse into, and tables of
// more than MaxHTMLTableCells cells, which it would build in full.
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
	if err := checkHTMLTables(doc); err != nil {
		return "", fmt.Errorf("HTML: %w", err)
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

// htmlTable is what checkHTMLTables counts of a table: its rows, its widest row,
// and the cells its colspan and rowspan attributes add.
type htmlTable struct {
	rows, width, spanned, overhang int
}

// checkHTMLTables refuses a table the converter's table plugin would spend time
// or memory on out of proportion to the HTML, with ErrTooLarge. The plugin pads
// each row to the widest one, so one row of n cells over n rows of one cell is n²
// cells; it fills the cells a colspan or rowspan covers one by one, each an
// insertion into its row, so colspan=1000000 rowspan=1000000 is 10^12 of them.
// Counted as the plugin counts: a table's rows are all the tr elements inside it,
// nested tables' too, and a row's cells all the td and th elements inside it.
// The walk is iterative and linear in the document times its table nesting.
func checkHTMLTables(doc *html.Node) error {
	type frame struct {
		n    *html.Node
		exit bool
	}
	var (
		tables []*htmlTable
		rows   []int // cells of each open tr
		stack  = []frame{{n: doc}}
	)
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n := f.n
		isElem := n.Type == html.ElementNode
		if f.exit {
			switch {
			case isElem && n.Data == "table":
				t := tables[len(tables)-1]
				tables = tables[:len(tables)-1]
				cells := (t.rows + t.overhang + 1) * t.width
				if cells > MaxHTMLTableCells || cells < 0 || t.spanned > MaxHTMLTableCells ||
					t.spanned*max(t.width, 1) > MaxHTMLTableCells*64 {
					return fmt.Errorf("a table of %d rows by %d columns (%d cells added by colspan and rowspan), over the limit of %d cells: %w",
						t.rows+t.overhang, t.width, t.spanned, MaxHTMLTableCells, ErrTooLarge)
				}
			case isElem && n.Data == "tr":
				cells := rows[len(rows)-1]
				rows = rows[:len(rows)-1]
				for _, t := range tables {
					t.rows++
					t.width = max(t.width, cells)
				}
			}
			continue
		}
		if isElem {
			switch n.Data {
			case "table":
				tables = append(tables, &htmlTable{})
			case "tr":
				rows = append(rows, 0)
			case "td", "th":
				col := spanAttr(n, "colspan")
				row := spanAttr(n, "rowspan")
				for i := range rows {
					rows[i] += col
				}
				for _, t := range tables {
					t.spanned += col*row - 1
					t.overhang = max(t.overhang, row-1)
				}
			}
			stack = append(stack, frame{n: n, exit: true})
		}
		for c := n.LastChild; c != nil; c = c.PrevSibling {
			stack = append(stack, frame{n: c})
		}
	}
	return nil
}

// spanAttr returns a cell's colspan or rowspan as the table plugin reads it (1
// when absent, invalid or below 1), at most MaxHTMLTableCells+1 so that the sums
// of checkHTMLTables cannot overflow.
func spanAttr(n *html.Node, key string) int {
	for _, a := range n.Attr {
		if a.Key == key {
			v, err := strconv.Atoi(a.Val)
			if err != nil && !errors.Is(err, strconv.ErrRange) {
				return 1
			}
			if errors.Is(err, strconv.ErrRange) && len(a.Val) > 0 && a.Val[0] != '-' {
				return MaxHTMLTableCells + 1
			}
			if v < 1 {
				return 1
			}
			return min(v, MaxHTMLTableCells+1)
		}
	}
	return 1
}
