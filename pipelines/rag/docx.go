package rag

import (
	"archive/zip"
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// zipKind reports whether data is a zip holding a DOCX ("docx") or an XLSX
// ("xlsx") main part, or neither ("").
func zipKind(data []byte) string {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return ""
	}
	for _, f := range zr.File {
		switch f.Name {
		case "word/document.xml":
			return "docx"
		case "xl/workbook.xml":
			return "xlsx"
		}
	}
	return ""
}

// errLimit is what boundedReader answers once its limit is passed.
var errLimit = errors.New("read limit passed")

// boundedReader reads from r and fails with errLimit once more than n bytes have
// been read, so a zip bomb is refused instead of inflated.
type boundedReader struct {
	r io.Reader
	n int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.n < 0 {
		return 0, errLimit
	}
	if int64(len(p)) > b.n+1 {
		p = p[:b.n+1]
	}
	k, err := b.r.Read(p)
	b.n -= int64(k)
	if b.n < 0 {
		return k, errLimit
	}
	return k, err
}

// convertDOCX renders the body of a DOCX's word/document.xml as Markdown:
// paragraphs, headings (styles Title and Heading1..6, or an outline level; a
// style's definition in word/styles.xml, when there is one, says whether it is a
// heading: docxStyles), list
// paragraphs as "- " items and tables as Markdown tables; a table inside a table
// cell is flattened into the cell's text. Tables nested deeper than MaxTableDepth
// are refused. Headers, footers, footnotes, comments
// and images are left out.
func convertDOCX(data []byte) (string, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return "", fmt.Errorf("DOCX is not a readable zip: %w: %w", ErrMalformed, err)
	}
	var doc, styles *zip.File
	for _, f := range zr.File {
		switch f.Name {
		case "word/document.xml":
			doc = f
		case "word/styles.xml":
			styles = f
		}
	}
	if doc == nil {
		return "", fmt.Errorf("DOCX has no word/document.xml: %w", ErrMalformed)
	}
	if doc.UncompressedSize64 > MaxUnzippedBytes {
		return "", fmt.Errorf("DOCX word/document.xml is %d bytes unzipped, over the limit of %d: %w", doc.UncompressedSize64, MaxUnzippedBytes, ErrTooLarge)
	}
	// The size in the zip's directory can lie; the read is bounded too.
	rc, err := doc.Open()
	if err != nil {
		return "", fmt.Errorf("DOCX word/document.xml: %w: %w", ErrMalformed, err)
	}
	defer rc.Close()
	md, err := renderDocumentXML(&boundedReader{r: rc, n: MaxUnzippedBytes}, docxStyles(styles))
	if errors.Is(err, errLimit) {
		return "", fmt.Errorf("DOCX word/document.xml expands beyond %d bytes: %w", MaxUnzippedBytes, ErrTooLarge)
	}
	if errors.Is(err, ErrTooLarge) {
		return "", fmt.Errorf("DOCX word/document.xml: %w", err)
	}
	if err != nil {
		return "", fmt.Errorf("DOCX word/document.xml: %w: %w", ErrMalformed, err)
	}
	return md, nil
}

// docxTable is a table being read: its finished rows, the row and the cell being
// read.
type docxTable struct {
	rows   [][]string
	row    []string
	cell   []string
	budget tableBudget
}

// renderDocumentXML streams WordprocessingML and writes its Markdown; styles
// gives the heading level of the paragraph styles it defines (docxStyles).
func renderDocumentXML(r io.Reader, styles map[string]int) (string, error) {
	dec := xml.NewDecoder(r)
	var (
		out     strings.Builder
		tables  []*docxTable
		para    strings.Builder
		inPara  bool
		inText  bool
		heading int
		list    bool
		rooted  bool
	)
	emit := func(block string) error {
		if out.Len() > 0 {
			out.WriteString("\n\n")
		}
		out.WriteString(block)
		if out.Len() > MaxMarkdownBytes {
			return fmt.Errorf("Markdown beyond %d bytes: %w", MaxMarkdownBytes, ErrTooLarge)
		}
		return nil
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if !rooted {
				if t.Name.Local != "document" {
					return "", fmt.Errorf("root element is %q, not w:document", t.Name.Local)
				}
				rooted = true
			}
			switch t.Name.Local {
			case "drawing", "pict", "object", "AlternateContent":
				// Text boxes and embedded objects nest paragraphs inside a
				// paragraph; they are left out.
				if err := dec.Skip(); err != nil {
					return "", err
				}
			case "p":
				inPara, heading, list = true, 0, false
				para.Reset()
			case "pStyle":
				id := attr(t, "val")
				level, ok := styles[id]
				if !ok {
					level = headingLevel(id)
				}
				heading = max(heading, level)
			case "outlineLvl":
				if n, err := strconv.Atoi(attr(t, "val")); err == nil && n >= 0 && n < 6 {
					heading = max(heading, n+1)
				}
			case "numPr":
				list = true
			case "t":
				inText = true
			case "tab":
				if inPara {
					para.WriteString("\t")
				}
			case "br", "cr":
				if inPara {
					para.WriteString("\n")
				}
			case "tbl":
				// Each level copies the text of the levels inside it into its
				// cell: unbounded nesting would cost the square of the depth.
				if len(tables) >= MaxTableDepth {
					return "", fmt.Errorf("tables nested deeper than %d: %w", MaxTableDepth, ErrTooLarge)
				}
				tables = append(tables, &docxTable{})
			case "tr":
				if len(tables) > 0 {
					tables[len(tables)-1].row = nil
				}
			case "tc":
				if len(tables) > 0 {
					tables[len(tables)-1].cell = nil
				}
			}
		case xml.CharData:
			if inText && inPara {
				para.Write(t)
				if para.Len() > MaxMarkdownBytes {
					return "", fmt.Errorf("paragraph beyond %d bytes: %w", MaxMarkdownBytes, ErrTooLarge)
				}
			}
		case xml.EndElement:
			switch t.Name.Local {
			case "t":
				inText = false
			case "p":
				if !inPara {
					continue
				}
				inPara = false
				text := strings.TrimSpace(para.String())
				if text == "" {
					continue
				}
				if len(tables) > 0 {
					tb := tables[len(tables)-1]
					tb.cell = append(tb.cell, text)
					continue
				}
				text = convertText(text)
				switch {
				case heading > 0:
					text = strings.Repeat("#", heading) + " " + strings.ReplaceAll(text, "\n", " ")
				case list:
					text = "- " + text
				}
				if err := emit(text); err != nil {
					return "", err
				}
			case "tc":
				if len(tables) > 0 {
					tb := tables[len(tables)-1]
					tb.row = append(tb.row, strings.Join(tb.cell, "\n"))
				}
			case "tr":
				if len(tables) > 0 {
					tb := tables[len(tables)-1]
					if err := tb.budget.add(tb.row); err != nil {
						return "", err
					}
					tb.rows = append(tb.rows, tb.row)
				}
			case "tbl":
				if len(tables) == 0 {
					continue
				}
				tb := tables[len(tables)-1]
				tables = tables[:len(tables)-1]
				if len(tables) > 0 {
					// A nested table becomes text in the enclosing cell.
					outer := tables[len(tables)-1]
					for _, row := range tb.rows {
						outer.cell = append(outer.cell, strings.Join(row, " ; "))
					}
					continue
				}
				table, err := markdownTable(tb.rows)
				if err != nil {
					return "", err
				}
				if table != "" {
					if err := emit(strings.TrimRight(table, "\n")); err != nil {
						return "", err
					}
				}
			}
		}
	}
	if !rooted {
		return "", errors.New("no w:document element")
	}
	if out.Len() > 0 {
		out.WriteString("\n")
	}
	return out.String(), nil
}

// attr returns the value of the attribute of e with local name local, or "".
func attr(e xml.StartElement, local string) string {
	for _, a := range e.Attr {
		if a.Name.Local == local {
			return a.Value
		}
	}
	return ""
}

// docxStyles reads a DOCX's word/styles.xml (nil: none) and returns the heading
// level of each paragraph style it defines, by style ID (0: no heading). A style
// ID is the style's name in the language of the Word that wrote it
// ("berschrift1", "Titre2"); its definition says what it is: its outline level
// (0 to 5: a heading of level 1 to 6, 9: body text), else its name ("heading 1"
// and "Title" in every language), else its ID, else the style it is based on.
// A styles part that cannot be read gives nil: style IDs are then read as they
// are (headingLevel).
func docxStyles(f *zip.File) map[string]int {
	if f == nil || f.UncompressedSize64 > MaxUnzippedBytes {
		return nil
	}
	rc, err := f.Open()
	if err != nil {
		return nil
	}
	defer rc.Close()
	type style struct {
		name, basedOn string
		outline       int // -1: none
	}
	defs := map[string]*style{}
	dec := xml.NewDecoder(&boundedReader{r: rc, n: MaxUnzippedBytes})
	var cur *style
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "style":
				cur = nil
				if typ := attr(t, "type"); typ == "paragraph" || typ == "" {
					cur = &style{outline: -1}
					defs[attr(t, "styleId")] = cur
				}
			case "name":
				if cur != nil {
					cur.name = attr(t, "val")
				}
			case "basedOn":
				if cur != nil {
					cur.basedOn = attr(t, "val")
				}
			case "outlineLvl":
				if n, err := strconv.Atoi(attr(t, "val")); err == nil && cur != nil && n >= 0 {
					cur.outline = n
				}
			}
		case xml.EndElement:
			if t.Name.Local == "style" {
				cur = nil
			}
		}
	}
	var level func(id string, depth int) int
	level = func(id string, depth int) int {
		d := defs[id]
		switch {
		case d == nil:
			return headingLevel(id)
		case d.outline >= 0 && d.outline < 6:
			return d.outline + 1
		case d.outline >= 0:
			return 0
		case headingLevel(d.name) > 0:
			return headingLevel(d.name)
		case headingLevel(id) > 0:
			return headingLevel(id)
		case d.basedOn != "" && depth < 16:
			return level(d.basedOn, depth+1)
		}
		return 0
	}
	out := make(map[string]int, len(defs))
	for id := range defs {
		out[id] = level(id, 0)
	}
	return out
}

// headingLevel returns the Markdown heading level of a paragraph style ID: 1 for
// "Title", n for "Heading<n>" or "heading <n>" (1..6), 0 for any other style.
func headingLevel(style string) int {
	s := strings.ToLower(strings.ReplaceAll(style, " ", ""))
	if s == "title" {
		return 1
	}
	if rest, ok := strings.CutPrefix(s, "heading"); ok {
		if n, err := strconv.Atoi(rest); err == nil && n >= 1 && n <= 6 {
			return n
		}
	}
	return 0
}
