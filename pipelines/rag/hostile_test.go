package rag

import (
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/xuri/excelize/v2"
)

// Hostile input: each test below holds a few KB that cost the converter without
// its bound time or memory out of all proportion (quadratic, or far beyond the
// machine), and asserts the clear error or the bounded result instead.

// pdfWith builds a PDF of the objects (numbered from 1, the first the catalog)
// with a correct xref.
func pdfWith(objs ...string) []byte {
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

const (
	pdfPage = "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>"
	pdfFont = "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
)

func pdfText(text string) string {
	content := "BT /F1 24 Tf 72 720 Td (" + text + ") Tj ET"
	return fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", len(content), content)
}

// A page tree node that lists itself among its kids. The reader's Page(n)
// descends into it forever: without the walk's node bound this test hangs
// until the test timeout.
func TestConvertPDFRefusesCyclicPageTree(t *testing.T) {
	data := pdfWith(
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
		pdfPage, pdfText("Hello"), pdfFont,
	)
	_, err := Convert("a.pdf", data)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "page tree") {
		t.Fatalf("Convert(cyclic page tree) = %v, want ErrTooLarge naming the page tree", err)
	}
}

// A /Count of 10^12 over one page: a loop over NumPage() looks up 10^12 pages
// (without the walk this test hangs until the test timeout); the walk reads the
// one page there is.
func TestConvertPDFIgnoresALyingPageCount(t *testing.T) {
	data := pdfWith(
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1000000000000 >>",
		pdfPage, pdfText("Hello PDF world"), pdfFont,
	)
	md, err := Convert("a.pdf", data)
	if err != nil || md != "# Page 1\n\nHello PDF world\n" {
		t.Fatalf("Convert(lying /Count) = %q, %v", md, err)
	}
}

// One Flate stream of 1 KB that expands to 1 MiB, listed 300 times as a page's
// contents: 300 MiB to interpret from a 2 KB file. It is refused by the budget
// of MaxUnzippedBytes (without it Convert interprets all 300 MiB and succeeds).
func TestConvertPDFRefusesAStreamBomb(t *testing.T) {
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	zw.Write(bytes.Repeat([]byte(" "), 1<<20))
	zw.Close()
	refs := strings.TrimSpace(strings.Repeat("4 0 R ", 300))
	data := pdfWith(
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents ["+refs+"] /Resources << /Font << /F1 5 0 R >> >> >>",
		fmt.Sprintf("<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream", z.Len(), z.Bytes()),
		pdfFont,
	)
	_, err := Convert("a.pdf", data)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprint(MaxUnzippedBytes)) {
		t.Fatalf("Convert(stream bomb) = %v, want ErrTooLarge naming the limit", err)
	}
}

// Tables nested 100,000 deep in a DOCX of 25 KB: each level copies the text of
// the levels inside it, so without the depth bound this costs the square of the
// depth (minutes and GBs) and then succeeds.
func TestConvertDOCXRefusesDeeplyNestedTables(t *testing.T) {
	const depth = 100_000
	body := strings.Repeat("<w:tbl><w:tr><w:tc><w:p><w:r><w:t>x</w:t></w:r></w:p>", depth) +
		strings.Repeat("</w:tc></w:tr></w:tbl>", depth)
	_, err := Convert("a.docx", docxBytes(t, body))
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprintf("nested deeper than %d", MaxTableDepth)) {
		t.Fatalf("Convert(nested tables) = %v, want ErrTooLarge naming MaxTableDepth", err)
	}
	// Nesting within the bound still converts, the inner tables as text.
	ok := strings.Repeat("<w:tbl><w:tr><w:tc><w:p><w:r><w:t>x</w:t></w:r></w:p>", 3) +
		strings.Repeat("</w:tc></w:tr></w:tbl>", 3)
	md, err := Convert("a.docx", docxBytes(t, ok))
	if err != nil || md != "| x<br>x<br>x |\n| --- |\n" {
		t.Fatalf("Convert(3 nested tables) = %q, %v", md, err)
	}
}

// A table is as wide as its widest row. Each input below is one wide row over
// many short ones, whose Markdown table would be about 100,000 × 100,000 cells
// (tens of GB): without the budget Convert builds it before looking at its size
// and runs out of memory.
func TestConvertRefusesAWideTableBeforeWritingIt(t *testing.T) {
	const n = 100_000
	var docx strings.Builder
	docx.WriteString("<w:tbl><w:tr>" + strings.Repeat("<w:tc/>", n) + "</w:tr>")
	docx.WriteString(strings.Repeat("<w:tr><w:tc/></w:tr>", n) + "</w:tbl>")
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"a.csv", []byte(strings.Repeat(",", n) + "\n" + strings.Repeat("a\n", n))},
		{"a.docx", docxBytes(t, docx.String())},
	} {
		_, err := Convert(c.name, c.data)
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "columns gives Markdown beyond") {
			t.Errorf("Convert(%s) = %v, want ErrTooLarge for the table", c.name, err)
		}
	}
}

// A workbook of 6 KB naming one cell at XFD1048576: its sheet is 2^34 cells.
// Without reading rows one at a time under the budget, excelize's GetRows
// allocates them all and the process runs out of memory.
func TestConvertXLSXRefusesAFarCell(t *testing.T) {
	f := excelize.NewFile()
	defer f.Close()
	if err := f.SetCellValue("Sheet1", "A1", "head"); err != nil {
		t.Fatal(err)
	}
	if err := f.SetCellValue("Sheet1", "XFD1048576", "far"); err != nil {
		t.Fatal(err)
	}
	buf, err := f.WriteToBuffer()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Convert("a.xlsx", buf.Bytes())
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "Sheet1") {
		t.Fatalf("Convert(far cell) = %v, want ErrTooLarge naming the sheet", err)
	}
}

// HTML tables the table plugin would build cell by cell: one row of 100,000
// cells over 100,000 rows of one (10^10 padded cells from 1.5 MB), and one cell
// spanning 10^6 × 10^6 (10^12 covered cells from 60 bytes). Without the count of
// checkHTMLTables both run out of memory.
func TestConvertHTMLRefusesHugeTables(t *testing.T) {
	const n = 100_000
	for name, doc := range map[string]string{
		"wide": "<table><tr>" + strings.Repeat("<td>a</td>", n) + "</tr>" + strings.Repeat("<tr><td>b</td></tr>", n) + "</table>",
		"span": `<table><tr><td colspan="1000000" rowspan="1000000">a</td></tr></table>`,
	} {
		_, err := Convert("a.html", []byte("<html><body>"+doc))
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprintf("over the limit of %d cells", MaxHTMLTableCells)) {
			t.Errorf("Convert(%s table) = %v, want ErrTooLarge naming MaxHTMLTableCells", name, err)
		}
	}
	// A table within the limit, spans and all, still converts.
	md, err := Convert("a.html", []byte(`<table><tr><th>a</th><th>b</th></tr><tr><td colspan="2">c</td></tr></table>`))
	if err != nil || !strings.Contains(md, "| a | b |") || !strings.Contains(md, "| c |") {
		t.Fatalf("Convert(small table) = %q, %v", md, err)
	}
}

// countingTokenizer counts characters as tokens and counts its calls.
type countingTokenizer struct{ calls int }

func (c *countingTokenizer) Count(text string) int {
	c.calls++
	return utf8.RuneCountInString(text)
}

// With MaxChunks, Pack stops after MaxChunks+1 chunks: the work on a document far
// over the limit is the work on one just over it. Without the stop, the 200,000
// paragraphs below (and the 1,000,000 sentences of the second case) are all
// counted.
func TestPackStopsAfterMaxChunks(t *testing.T) {
	for name, md := range map[string]string{
		"paragraphs": strings.Repeat("Some words here.\n\n", 200_000),
		"sentences":  strings.Repeat("One. ", 1_000_000),
	} {
		tk := &countingTokenizer{}
		chunks := Pack(Split(md), ChunkOptions{MaxTokens: 40, OverlapTokens: -1, Tokenizer: tk, MaxChunks: 3})
		if len(chunks) != 4 || tk.calls > 100 {
			t.Errorf("%s: %d chunks after %d counts, want 4 chunks after a few counts", name, len(chunks), tk.calls)
		}
		all := Pack(Split(md[:2000]), ChunkOptions{MaxTokens: 40, OverlapTokens: -1, Tokenizer: &countingTokenizer{}})
		if !reflect.DeepEqual(chunks, all[:4]) {
			t.Errorf("%s: the chunks before the stop differ from those of a full Pack", name)
		}
	}
}

// A cross-reference table whose trailer's /Prev points back at itself: the
// reader follows /Prev chains without noticing a cycle. Without the read
// budget, Convert of these 590 bytes never returns (it hangs until the test
// timeout).
func TestConvertPDFRefusesAPrevCycle(t *testing.T) {
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		pdfPage, pdfText("Hello"), pdfFont,
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
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R /Prev %d >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref, xref)
	_, err := Convert("a.pdf", b.Bytes())
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "going round a cycle") {
		t.Fatalf("Convert(/Prev cycle) = %v, want ErrTooLarge naming the cycle", err)
	}
}

// pdfWithObjectStream builds a PDF 1.5 whose page (object 5) is compressed in
// object stream 7, listed by a cross-reference stream (object 6). With nested,
// the cross-reference stream says object stream 7 is itself in object stream 7.
func pdfWithObjectStream(nested bool) []byte {
	page := "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R /Resources << /Font << /F1 4 0 R >> >> >>"
	header := "5 0 "
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [5 0 R] /Count 1 >>",
		pdfText("Hello object stream"), pdfFont,
	}
	var b bytes.Buffer
	b.WriteString("%PDF-1.5\n")
	offsets := make([]int, len(objs))
	for i, o := range objs {
		offsets[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	objStm := b.Len()
	fmt.Fprintf(&b, "7 0 obj\n<< /Type /ObjStm /N 1 /First %d /Length %d >>\nstream\n%s%s\nendstream\nendobj\n",
		len(header), len(header)+len(page), header, page)
	// Entries of widths 1, 4 and 2 bytes: type, offset or stream, generation or index.
	var x bytes.Buffer
	entry := func(typ byte, f2 uint32, f3 uint16) {
		x.Write([]byte{typ, byte(f2 >> 24), byte(f2 >> 16), byte(f2 >> 8), byte(f2), byte(f3 >> 8), byte(f3)})
	}
	xref := b.Len()
	entry(0, 0, 65535)
	for _, off := range offsets {
		entry(1, uint32(off), 0)
	}
	entry(2, 7, 0)
	entry(1, uint32(xref), 0)
	if nested {
		entry(2, 7, 0)
	} else {
		entry(1, uint32(objStm), 0)
	}
	fmt.Fprintf(&b, "6 0 obj\n<< /Type /XRef /Size 8 /W [1 4 2] /Root 1 0 R /Length %d >>\nstream\n", x.Len())
	b.Write(x.Bytes())
	fmt.Fprintf(&b, "\nendstream\nendobj\nstartxref\n%d\n%%%%EOF\n", xref)
	return b.Bytes()
}

// An object stream listed inside itself: the reader resolves the stream of a
// compressed object recursively before reading anything, so without the check
// these bytes overflow the goroutine's stack, a fatal error that kills the whole
// test binary (recover cannot stop it). A sound object stream still reads.
func TestConvertPDFRefusesNestedObjectStreams(t *testing.T) {
	md, err := Convert("a.pdf", pdfWithObjectStream(false))
	if err != nil || md != "# Page 1\n\nHello object stream\n" {
		t.Fatalf("Convert(object stream) = %q, %v", md, err)
	}
	_, err = Convert("a.pdf", pdfWithObjectStream(true))
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "itself in an object stream") {
		t.Fatalf("Convert(nested object stream) = %v, want ErrMalformed naming the nesting", err)
	}
}

// A page whose /Parent is itself and that has no /Resources: the reader looks
// for inherited resources up the /Parent chain without noticing the cycle.
// Without the read budget this never returns (it hangs until the test timeout).
func TestConvertPDFRefusesAParentCycle(t *testing.T) {
	data := pdfWith(
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 3 0 R /Contents 4 0 R >>", pdfText("Hello"), pdfFont,
	)
	_, err := Convert("a.pdf", data)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "going round a cycle") {
		t.Fatalf("Convert(/Parent cycle) = %v, want ErrTooLarge naming the cycle", err)
	}
}

// The rows and columns without text that a table leaves out are read all the
// same: sheets of them bound a workbook together as their Markdown did when it
// held them. Each sheet here, a cell at A1 and one at Z150000, is read alone; six
// are past MaxMarkdownBytes of rows and columns.
func TestConvertXLSXBoundsTheSheetsTogether(t *testing.T) {
	book := func(sheets int) []byte {
		f := excelize.NewFile()
		defer f.Close()
		for i := range sheets {
			name := fmt.Sprint("S", i)
			if _, err := f.NewSheet(name); err != nil {
				t.Fatal(err)
			}
			for _, cell := range []string{"A1", "Z150000"} {
				if err := f.SetCellValue(name, cell, "x"); err != nil {
					t.Fatal(err)
				}
			}
		}
		buf, err := f.WriteToBuffer()
		if err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	if md, err := Convert("one.xlsx", book(1)); err != nil || !strings.Contains(md, "## S0\n\n| x |  |\n| --- | --- |\n|  | x |\n") {
		t.Fatalf("Convert(one sheet) = %.200q, %v; want its two cells", md, err)
	}
	if _, err := Convert("six.xlsx", book(6)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Convert(six sheets) = %v, want ErrTooLarge", err)
	}
}
