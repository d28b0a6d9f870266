package rag

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/xuri/excelize/v2"
)

func TestConvertText(t *testing.T) {
	tests := []struct {
		name, file, in string
		want           string
	}{
		{"markdown as is", "a.md", "# T\r\n\r\nbody\r\n", "# T\n\nbody\n"},
		{"text keeps paragraphs, escapes markers", "a.txt", "# not a heading\n\nsecond para\n---\n", "\\# not a heading\n\nsecond para\n\\---\n"},
		{"csv with a pipe and a short row", "p.csv", "name,note\nann,\"a|b\"\nbob\n", "| name | note |\n| --- | --- |\n| ann | a\\|b |\n| bob |  |\n"},
		{"json under its name", "dir/cfg.json", `{"a":[1,2]}`, "# cfg.json\n\n```json\n{\n  \"a\": [\n    1,\n    2\n  ]\n}\n```\n"},
		{"go source fenced", "main.go", "package main\n", "# main.go\n\n```go\npackage main\n```\n"},
		{"fence longer than backticks inside", "x.py", "s = '```'\n", "# x.py\n\n````python\ns = '```'\n````\n"},
		{"unknown extension sniffed as JSON", "data", `[1]`, "# data\n\n```json\n[\n  1\n]\n```\n"},
		{"unknown extension sniffed as text", "README", "plain words", "plain words"},
		{"front matter: dropped, its title a heading", "hugo.md", "---\ntitle: \"Install  guide\"\nweight: 10\ntags: [ops]\n---\n\n## Linux\n\nRun it.\n", "# Install guide\n\n## Linux\n\nRun it.\n"},
		{"front matter without a title, closed by ...", "page.md", "---\nlayout: page\n...\n# A\n\ntext", "# A\n\ntext"},
		{"front matter with a block title", "b.md", "---\ntitle: >-\n  Long\n---\nbody", "body"},
		{"a rule first is no front matter", "rule.md", "---\n\nText after a rule.\n---\n", "---\n\nText after a rule.\n---\n"},
		{"a setext heading first is no front matter", "setext.md", "---\nSome heading\n---\ntext", "---\nSome heading\n---\ntext"},
		{"an unclosed block is no front matter", "open.md", "---\ntitle: x\nno end", "---\ntitle: x\nno end"},
		{"two rules are no front matter", "rules.md", "---\n---\ntext", "---\n---\ntext"},
		{"markdown with a byte order mark", "win.md", "\ufeff# Install\r\n\r\nRun it.\r\n", "# Install\n\nRun it.\n"},
		{"json with a byte order mark", "win.json", "\ufeff{\"a\":1}", "# win.json\n\n```json\n{\n  \"a\": 1\n}\n```\n"},
		{"json sniffed with a byte order mark", "data", "\ufeff[1]", "# data\n\n```json\n[\n  1\n]\n```\n"},
		{"UTF-16LE text with its byte order mark", "win.txt", utf16LE("\ufeffCopy the data directory, café.\r\n"), "Copy the data directory, café.\n"},
		{"UTF-16BE markdown with its byte order mark", "mac.md", utf16BE("\ufeff# Ops\n\nA 𝄞 clef."), "# Ops\n\nA 𝄞 clef."},
		{"UTF-16LE sniffed as text", "NOTES", utf16LE("\ufeffplain words"), "plain words"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Convert(tt.file, []byte(tt.in))
			if err != nil {
				t.Fatalf("Convert: %v", err)
			}
			if got != tt.want {
				t.Errorf("Convert(%q) =\n%q\nwant\n%q", tt.file, got, tt.want)
			}
		})
	}
}

// utf16LE and utf16BE encode s in UTF-16 (a leading U+FEFF is the byte order mark).
func utf16LE(s string) string {
	var b []byte
	for _, u := range utf16.Encode([]rune(s)) {
		b = append(b, byte(u), byte(u>>8))
	}
	return string(b)
}

func utf16BE(s string) string {
	var b []byte
	for _, u := range utf16.Encode([]rune(s)) {
		b = append(b, byte(u>>8), byte(u))
	}
	return string(b)
}

func TestConvertHTMLKeepsTable(t *testing.T) {
	in := `<html><body><h1>Staff</h1><p>Who works here.</p>
<table><thead><tr><th>Name</th><th>Age</th></tr></thead>
<tbody><tr><td>Alice</td><td>30</td></tr><tr><td>Bob</td><td>41</td></tr></tbody></table>
</body></html>`
	for _, name := range []string{"staff.html", "staff"} { // by extension, and sniffed
		md, err := Convert(name, []byte(in))
		if err != nil {
			t.Fatalf("Convert(%q): %v", name, err)
		}
		var table *Paragraph
		paras := Split(md)
		for i := range paras {
			if strings.HasPrefix(paras[i].Text, "|") {
				table = &paras[i]
			}
		}
		if table == nil {
			t.Fatalf("Convert(%q) has no Markdown table:\n%s", name, md)
		}
		lines := strings.Split(table.Text, "\n")
		if len(lines) != 4 {
			t.Fatalf("table has %d lines, want 4 (header, rule, 2 rows):\n%s", len(lines), table.Text)
		}
		if !strings.Contains(lines[0], "Name") || strings.Trim(lines[1], "|-: ") != "" ||
			!strings.Contains(lines[2], "Alice") || !strings.Contains(lines[3], "41") {
			t.Errorf("table rows wrong:\n%s", table.Text)
		}
		if got := strings.Join(table.HeadingPath, " > "); got != "# Staff" {
			t.Errorf("table heading path = %q, want %q", got, "# Staff")
		}
	}
}

// docxBytes builds a DOCX whose word/document.xml has the body given.
func docxBytes(t *testing.T, body string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create("word/document.xml")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>%s</w:body></w:document>`, body)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestConvertDOCX(t *testing.T) {
	p := func(style, text string) string {
		pr := ""
		if style != "" {
			pr = `<w:pPr><w:pStyle w:val="` + style + `"/></w:pPr>`
		}
		return `<w:p>` + pr + `<w:r><w:t>` + text + `</w:t></w:r></w:p>`
	}
	cell := func(text string) string { return `<w:tc>` + p("", text) + `</w:tc>` }
	body := p("Title", "Report") + p("Heading2", "Intro") + p("", "Hello") +
		`<w:p><w:r><w:t xml:space="preserve">split </w:t></w:r><w:r><w:t>run</w:t></w:r></w:p>` +
		`<w:p><w:pPr><w:numPr><w:ilvl w:val="0"/></w:numPr></w:pPr><w:r><w:t>item</w:t></w:r></w:p>` +
		`<w:tbl><w:tr>` + cell("k") + cell("v") + `</w:tr><w:tr>` + cell("a|b") + cell("2") + `</w:tr></w:tbl>`
	md, err := Convert("r.docx", docxBytes(t, body))
	if err != nil {
		t.Fatalf("Convert: %v", err)
	}
	want := "# Report\n\n## Intro\n\nHello\n\nsplit run\n\n- item\n\n| k | v |\n| --- | --- |\n| a\\|b | 2 |\n"
	if md != want {
		t.Errorf("Convert(docx) =\n%q\nwant\n%q", md, want)
	}
	if sniffed, err := Convert("upload.bin", docxBytes(t, body)); err != nil || sniffed != want {
		t.Errorf("sniffed DOCX = %q, %v; want the same Markdown", sniffed, err)
	}
}

func TestConvertXLSX(t *testing.T) {
	f := excelize.NewFile()
	for cell, v := range map[string]any{"A1": "item", "B1": "price", "A2": "tea", "B2": 3} {
		if err := f.SetCellValue("Sheet1", cell, v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.NewSheet("Empty"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.NewSheet("Notes"); err != nil {
		t.Fatal(err)
	}
	if err := f.SetCellValue("Notes", "A1", "pipe | here"); err != nil {
		t.Fatal(err)
	}
	buf, err := f.WriteToBuffer()
	if err != nil {
		t.Fatal(err)
	}
	md, err := Convert("book.xlsx", buf.Bytes())
	if err != nil {
		t.Fatalf("Convert: %v", err)
	}
	want := "## Sheet1\n\n| item | price |\n| --- | --- |\n| tea | 3 |\n\n## Notes\n\n| pipe \\| here |\n| --- |\n"
	if md != want {
		t.Errorf("Convert(xlsx) =\n%q\nwant\n%q", md, want)
	}
}

// pdfBytes builds a one-page PDF showing text in Helvetica, with a correct xref.
func pdfBytes(text string) []byte {
	content := "BT /F1 24 Tf 72 720 Td (" + text + ") Tj ET"
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
		fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", len(content), content),
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
	}
	var b bytes.Buffer
	b.WriteString("%PDF-1.4\n")
	offsets := make([]int, len(objs))
	for i, o := range objs {
		offsets[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, off := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref)
	return b.Bytes()
}

func TestConvertPDF(t *testing.T) {
	for _, name := range []string{"doc.pdf", "doc"} {
		md, err := Convert(name, pdfBytes("Hello PDF world"))
		if err != nil {
			t.Fatalf("Convert(%q): %v", name, err)
		}
		paras := Split(md)
		if len(paras) != 1 || !strings.Contains(paras[0].Text, "Hello PDF world") ||
			strings.Join(paras[0].HeadingPath, ">") != "# Page 1" {
			t.Errorf("Convert(%q) = %q, want the page's text under # Page 1", name, md)
		}
	}
}

// zipWith builds a zip holding one file of n bytes of spaces.
func zipWith(t *testing.T, name string, n int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(w, spaces{}, n); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// spaces is an endless reader of spaces.
type spaces struct{}

func (spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

func TestBoundedReaderStopsAtItsLimit(t *testing.T) {
	for _, size := range []int64{99, 100, 101, 5000} {
		n, err := io.Copy(io.Discard, &boundedReader{r: io.LimitReader(spaces{}, size), n: 100})
		if size <= 100 && (err != nil || n != size) {
			t.Errorf("reading %d bytes under a limit of 100: %d, %v", size, n, err)
		}
		if size > 100 && (!errors.Is(err, errLimit) || n > 101) {
			t.Errorf("reading %d bytes under a limit of 100: %d, %v; want errLimit after at most 101", size, n, err)
		}
	}
}

func TestConvertRefusesBadInput(t *testing.T) {
	nested := strings.Repeat("<div>", 100_000) + "deep" + strings.Repeat("</div>", 100_000)
	tests := []struct {
		name, file string
		data       []byte
		want       error
	}{
		{"corrupt docx zip", "a.docx", []byte("PK\x03\x04 this is not a zip"), ErrMalformed},
		{"corrupt xlsx zip", "a.xlsx", []byte("PK\x03\x04 this is not a zip"), ErrMalformed},
		{"zip without document.xml", "a.docx", zipWith(t, "other.xml", 10), ErrMalformed},
		{"docx that is not XML", "a.docx", zipWith(t, "word/document.xml", 10), ErrMalformed},
		{"docx zip bomb", "a.docx", zipWith(t, "word/document.xml", MaxUnzippedBytes+1), ErrTooLarge},
		{"xlsx zip bomb", "a.xlsx", zipWith(t, "xl/workbook.xml", MaxUnzippedBytes+1), ErrTooLarge},
		{"xlsx that is not a workbook", "a.xlsx", zipWith(t, "xl/workbook.xml", 10), ErrMalformed},
		{"corrupt pdf", "a.pdf", []byte("%PDF-1.4\n garbage"), ErrMalformed},
		{"truncated pdf", "a.pdf", pdfBytes("Hello")[:200], ErrMalformed},
		{"invalid UTF-8 text", "a.txt", []byte("ok \xff\xfe bad"), ErrMalformed},
		{"invalid UTF-8 source", "a.go", []byte("package \xff"), ErrMalformed},
		{"invalid JSON", "a.json", []byte(`{"a":`), ErrMalformed},
		{"unknown binary", "blob", []byte{0, 1, 2, 0xff, 0xfe}, ErrUnsupported},
		{"too large", "a.txt", make([]byte, MaxDocumentBytes+1), ErrTooLarge},
		{"deeply nested HTML", "a.html", []byte(nested), ErrTooLarge},
		{"NUL bytes only", "zeros.dat", make([]byte, 2000), ErrUnsupported},
		{"a NUL byte in Markdown", "a.md", []byte("# A\n\nhello\x00world"), ErrUnsupported},
		{"UTF-16 without a byte order mark", "win.txt", []byte(utf16LE("Copy the data directory.")), ErrUnsupported},
		{"UTF-16 of an odd length", "odd.txt", []byte(utf16LE("\ufeffab") + "x"), ErrMalformed},
		{"UTF-16 with a lone surrogate", "lone.txt", []byte{0xff, 0xfe, 'a', 0, 0x00, 0xd8, 'b', 0}, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md, err := Convert(tt.file, tt.data)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Convert(%q) = %d bytes, %v; want an error wrapping %v", tt.file, len(md), err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.file) {
				t.Errorf("error %q does not name the file %q", err, tt.file)
			}
		})
	}
}

func FuzzConvert(f *testing.F) {
	f.Add("a.pdf", pdfBytes("Hello"))
	f.Add("a.docx", []byte("PK\x03\x04"))
	f.Add("a.html", []byte("<table><tr><td>a</td></tr></table>"))
	f.Add("a.csv", []byte("a,b\n\"c"))
	f.Add("a", []byte("{\"a\": 1}"))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		md, err := Convert(name, data)
		if err == nil && len(md) > MaxMarkdownBytes {
			t.Fatalf("Convert gave %d bytes of Markdown", len(md))
		}
		if err != nil && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrUnsupported) {
			t.Fatalf("Convert(%q) error %v wraps none of the sentinels", name, err)
		}
	})
}

// ConvertFile reads a document by its file's extension, named by its own name: a
// Go file stored as "src/tool" is a Go fence under "# tool"; a file whose
// extension Convert does not know is read by the name's.
func TestConvertFileReadsByTheFilesExtension(t *testing.T) {
	for _, c := range []struct{ name, file, data, want string }{
		{"src/tool", "tool.go", "package tool\n", "# tool\n\n```go\npackage tool\n```\n"},
		{"docs/guide", "guide.md", "# Guide\n\ntext\n", "# Guide\n\ntext\n"},
		{"docs/page.md", "page.html", "<h1>Page</h1><p>text</p>", "# Page\n\ntext"},
		{"docs/guide.md", "upload.bin", "# Guide\n\ntext\n", "# Guide\n\ntext\n"},
		{"docs/notes", "-", "# Not a heading\n", "\\# Not a heading\n"},
	} {
		got, err := ConvertFile(c.name, c.file, []byte(c.data))
		if err != nil || got != c.want {
			t.Errorf("ConvertFile(%q, %q) = %q, %v; want %q", c.name, c.file, got, err, c.want)
		}
	}
}

// Format names the reading ConvertFile makes: by the file's extension, else the
// name's, else the content's; synonyms of one reading are one format.
func TestFormatNamesTheReading(t *testing.T) {
	utf16HTML := []byte{0xff, 0xfe}
	for _, r := range "<html><p>hi</p></html>" {
		utf16HTML = append(utf16HTML, byte(r), 0)
	}
	for _, c := range []struct {
		name, file string
		data       []byte
		want       string
	}{
		{"guide.md", "guide.md", []byte("# Guide"), "markdown"},
		{"docs/guide", "guide.markdown", []byte("# Guide"), "markdown"},
		{"docs/guide.md", "guide.txt", []byte("# Guide"), "text"},
		{"page.htm", "page.htm", []byte("<p>hi</p>"), "html"},
		{"page", "page", []byte("<!DOCTYPE html><p>hi</p>"), "html"},
		{"page", "page", utf16HTML, "html"},
		{"notes", "notes", []byte("just words"), "text"},
		{"data", "data", []byte(`{"a": 1}`), "json"},
		{"main.go", "main.go", []byte("package main"), "code/go"},
		{"blob", "blob", []byte{0xff, 0x00, 0x01}, ""},
	} {
		if got := Format(c.name, c.file, c.data); got != c.want {
			t.Errorf("Format(%q, %q) = %q, want %q", c.name, c.file, got, c.want)
		}
	}
}

// Rows and columns without text are left out of a table: a sheet whose empty
// cells are formatted down to row 20,000 (a style on whole columns, as
// spreadsheets are often kept) gave 20,000 lines of "|  |  |  |  |  |", hundreds
// of chunks of pipes, each embedded; a CSV's ",,," lines the same.
func TestTablesLeaveOutRowsAndColumnsWithoutText(t *testing.T) {
	f := excelize.NewFile()
	defer f.Close()
	for cell, v := range map[string]any{"A1": "item", "B1": "price", "A2": "tea", "B2": 3, "A20001": "total", "B20001": 3} {
		if err := f.SetCellValue("Sheet1", cell, v); err != nil {
			t.Fatal(err)
		}
	}
	style, err := f.NewStyle(&excelize.Style{Fill: excelize.Fill{Type: "pattern", Pattern: 1, Color: []string{"FFFF00"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.SetCellStyle("Sheet1", "A3", "E20000", style); err != nil {
		t.Fatal(err)
	}
	buf, err := f.WriteToBuffer()
	if err != nil {
		t.Fatal(err)
	}
	md, err := Convert("book.xlsx", buf.Bytes())
	want := "## Sheet1\n\n| item | price |\n| --- | --- |\n| tea | 3 |\n| total | 3 |\n"
	if err != nil || md != want {
		t.Errorf("Convert(a sheet formatted down to row 20,000) = %.300q, %v; want\n%q", md, err, want)
	}
	md, err = Convert("prices.csv", []byte("item,,price,\n,,,\ntea,,3,\n,,,\n , ,, \n"))
	if want := "| item | price |\n| --- | --- |\n| tea | 3 |\n"; err != nil || md != want {
		t.Errorf("Convert(a CSV with empty lines and columns) = %q, %v; want\n%q", md, err, want)
	}
}
