package rag

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// codeLanguages maps a source file's extension to the info string of its fence.
var codeLanguages = map[string]string{
	".go": "go", ".py": "python", ".js": "javascript", ".mjs": "javascript",
	".cjs": "javascript", ".jsx": "jsx", ".ts": "typescript", ".tsx": "tsx",
	".java": "java", ".kt": "kotlin", ".scala": "scala", ".c": "c", ".h": "c",
	".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp",
	".cs": "csharp", ".rs": "rust", ".rb": "ruby", ".php": "php", ".swift": "swift",
	".sh": "bash", ".bash": "bash", ".zsh": "zsh", ".ps1": "powershell",
	".lua": "lua", ".pl": "perl", ".r": "r", ".sql": "sql", ".proto": "protobuf",
	".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".xml": "xml", ".css": "css",
	".scss": "scss", ".ex": "elixir", ".exs": "elixir", ".erl": "erlang",
	".hs": "haskell", ".ml": "ocaml", ".clj": "clojure", ".dart": "dart",
	".zig": "zig", ".vue": "vue", ".svelte": "svelte", ".tf": "hcl",
}

// Convert turns a document into Markdown. name is the file name (only its extension
// and base name are used); data its content. The format comes from the extension:
//
//   - .md, .markdown: as is, but for a YAML front matter (a first line "---", lines
//     of "key: value", a line "---" or "..."), which is metadata, not text: it is
//     dropped, and its title, if any, becomes a first heading "# title" (a heading
//     of the document's own of level 1 replaces it);
//   - .txt, .text: plain text, its paragraphs kept and lines that Markdown would
//     read as a heading, a fence or a rule escaped;
//   - .html, .htm: converted by html-to-markdown, tables kept as Markdown tables;
//   - .csv: a Markdown table whose first row with text is the header (rows and
//     columns without text are left out, here and in every table below);
//   - .json: "# name" and the document pretty-printed in a ```json fence;
//   - source code (.go, .py, .js, .ts, .java, .c, .h, .rs, .rb, .sh and more):
//     "# name" and the file in a fence with its language;
//   - .xlsx: per sheet, "## sheet name" and a Markdown table of its rows;
//   - .docx: the body of word/document.xml, styles Title and Heading1..6 as
//     headings, list paragraphs as items, tables as Markdown tables;
//   - .pdf: the text of each page under a heading "# Page n" (text only: no
//     layout, no tables, nothing from a scanned page).
//
// An unknown or missing extension is sniffed: "%PDF-" is a PDF, a zip holding
// word/document.xml a DOCX and one holding xl/workbook.xml an XLSX; valid UTF-8 is
// HTML if it starts like HTML, JSON if it parses as JSON, and plain text otherwise.
//
// A UTF-8 byte order mark is dropped and line endings become "\n". Text that
// starts with a UTF-16 byte order mark (Windows' "Unicode") is read as UTF-16.
// Text holding a NUL byte is refused (ErrUnsupported): it is binary content, or
// UTF-16 without a byte order mark, which is valid UTF-8 byte by byte and would be
// indexed as letters between NULs that no query finds. Errors wrap ErrUnsupported, ErrTooLarge or ErrMalformed
// and never panic, whatever the bytes.
func Convert(name string, data []byte) (markdown string, err error) {
	return ConvertFile(name, name, data)
}

// ConvertFile is Convert of a document named name whose content came as the file
// file (an upload stored under a name of its own): file's extension says how to
// read it when Convert knows that extension, else name's does, else the content is
// sniffed, as in Convert. The Markdown and the errors name the document name.
func ConvertFile(name, file string, data []byte) (markdown string, err error) {
	if len(data) > MaxDocumentBytes {
		return "", fmt.Errorf("rag: convert %q: %d bytes, over the limit of %d: %w", name, len(data), MaxDocumentBytes, ErrTooLarge)
	}
	if data, err = fromUTF16(data); err != nil {
		return "", fmt.Errorf("rag: convert %q: %w", name, err)
	}
	kind := kindOf(name, file, func() []byte { return data })
	md, err := convertAs(kind, name, data)
	if err != nil {
		return "", fmt.Errorf("rag: convert %q: %w", name, err)
	}
	if len(md) > MaxMarkdownBytes {
		return "", fmt.Errorf("rag: convert %q: Markdown of %d bytes, over the limit of %d: %w", name, len(md), MaxMarkdownBytes, ErrTooLarge)
	}
	return md, nil
}

// kindOf is the format ConvertFile reads a document named name that came as the
// file file as: by file's extension, else name's, else by its content (data, after
// fromUTF16), as an extension, "" for binary content it does not know.
func kindOf(name, file string, data func() []byte) string {
	if kind, ok := knownKind(file); ok {
		return kind
	}
	if kind, ok := knownKind(name); ok {
		return kind
	}
	return sniff(data())
}

// ConversionVersion is the version of the reading of documents: Convert, Split
// and Pack. Raise it with a change that gives other chunks for the same bytes in
// the same format (a table's rows, a heading's bounds), so that a store that
// records it reads the documents it holds again when they are sent again,
// rather than skip them as unchanged. Version 1: tables leave out the rows and
// columns without text, a heading over MaxHeadingBytes is a paragraph.
const ConversionVersion = 1

// Format names the way ConvertFile reads a document named name that came as the
// file file: "markdown", "text", "html", "csv", "json", "xlsx", "docx", "pdf",
// "code/" and the language for source code ("code/go"), "" for content it does
// not read. The same bytes read in one format give the same Markdown: a caller
// that skips an unchanged document by its DocumentHash compares its format too,
// so that the bytes of guide.txt sent again as guide.md are converted anew.
func Format(name, file string, data []byte) string {
	kind := kindOf(name, file, func() []byte {
		if decoded, err := fromUTF16(data); err == nil {
			return decoded
		}
		return data
	})
	switch kind {
	case ".md", ".markdown":
		return "markdown"
	case ".txt", ".text":
		return "text"
	case ".html", ".htm":
		return "html"
	case ".csv", ".json", ".xlsx", ".docx", ".pdf":
		return kind[1:]
	}
	if lang, ok := codeLanguages[kind]; ok {
		return "code/" + lang
	}
	return ""
}

// knownKind is the format Convert reads a file named name as, by its extension,
// and whether it knows that extension.
func knownKind(name string) (string, bool) {
	ext := strings.ToLower(path.Ext(name))
	switch ext {
	case ".md", ".markdown", ".txt", ".text", ".html", ".htm", ".csv", ".json", ".xlsx", ".docx", ".pdf":
		return ext, true
	}
	_, ok := codeLanguages[ext]
	return ext, ok
}

// convertAs converts data as the format kind names (an extension).
func convertAs(kind, name string, data []byte) (string, error) {
	switch kind {
	case ".xlsx":
		return convertXLSX(data)
	case ".docx":
		return convertDOCX(data)
	case ".pdf":
		return convertPDF(data)
	case "":
		return "", fmt.Errorf("binary content of an unknown type: %w", ErrUnsupported)
	}
	if !utf8.Valid(data) {
		return "", fmt.Errorf("%s is not valid UTF-8: %w", kind, ErrMalformed)
	}
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return "", fmt.Errorf("%s holds a NUL byte (at byte %d): binary content, or text in UTF-16 without a byte order mark (save it as UTF-8): %w", kind, i, ErrUnsupported)
	}
	// A byte order mark (Windows editors write one) is no text: left in, it made
	// the first line "\ufeff# Title" a paragraph rather than a heading, and JSON
	// invalid.
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	text := normalizeNewlines(string(data))
	switch kind {
	case ".md", ".markdown":
		return dropFrontMatter(text), nil
	case ".txt", ".text":
		return convertText(text), nil
	case ".html", ".htm":
		return convertHTML(text)
	case ".csv":
		return convertCSV(text)
	case ".json":
		return convertJSON(name, data)
	}
	if lang, ok := codeLanguages[kind]; ok {
		return codeBlock(path.Base(name), lang, text), nil
	}
	return "", fmt.Errorf("extension %q: %w", kind, ErrUnsupported)
}

// fromUTF16 returns data as UTF-8 when it starts with a UTF-16 byte order mark
// (FF FE: little-endian, FE FF: big-endian), else data as it is. Half a code unit
// at the end or a lone surrogate is ErrMalformed, as invalid UTF-8 is.
func fromUTF16(data []byte) ([]byte, error) {
	var order func([]byte) uint16
	switch {
	case bytes.HasPrefix(data, []byte{0xff, 0xfe}):
		order = func(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }
	case bytes.HasPrefix(data, []byte{0xfe, 0xff}):
		order = func(b []byte) uint16 { return uint16(b[0])<<8 | uint16(b[1]) }
	default:
		return data, nil
	}
	if len(data)%2 != 0 {
		return nil, fmt.Errorf("UTF-16 text (it starts with a byte order mark) of an odd number of bytes, %d: %w", len(data), ErrMalformed)
	}
	out := make([]byte, 0, len(data))
	for i := 2; i < len(data); i += 2 {
		r := rune(order(data[i:]))
		if utf16.IsSurrogate(r) {
			at := i
			if i+3 < len(data) {
				r = utf16.DecodeRune(r, rune(order(data[i+2:])))
				i += 2
			} else {
				r = utf8.RuneError
			}
			if r == utf8.RuneError {
				return nil, fmt.Errorf("UTF-16 text with a lone surrogate at byte %d: %w", at, ErrMalformed)
			}
		}
		out = utf8.AppendRune(out, r)
	}
	return out, nil
}

// sniff names the format of data by its content, as an extension, or "" for binary
// content it does not know.
func sniff(data []byte) string {
	switch {
	case bytes.HasPrefix(data, []byte("%PDF-")):
		return ".pdf"
	case bytes.HasPrefix(data, []byte("PK\x03\x04")):
		switch zipKind(data) {
		case "docx":
			return ".docx"
		case "xlsx":
			return ".xlsx"
		}
		return ""
	case !utf8.Valid(data):
		return ""
	}
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	head := strings.ToLower(strings.TrimSpace(string(data[:min(len(data), 512)])))
	switch {
	case strings.HasPrefix(head, "<!doctype html"), strings.HasPrefix(head, "<html"),
		strings.HasPrefix(head, "<head"), strings.HasPrefix(head, "<body"):
		return ".html"
	case (strings.HasPrefix(head, "{") || strings.HasPrefix(head, "[")) && json.Valid(data):
		return ".json"
	}
	return ".txt"
}

// dropFrontMatter drops the YAML front matter of a Markdown text (static site
// generators put a page's title, date, tags and layout there), putting its title
// in its place as "# title". A text whose first line is "---" but whose next
// lines do not read as YAML keys (a thematic break, a setext heading) is left as it
// is, as is one whose block does not close within frontMatterMax bytes.
func dropFrontMatter(text string) string {
	rest, ok := strings.CutPrefix(text, "---\n")
	if !ok {
		return text
	}
	title := ""
	for pos, first := 0, true; pos < len(rest) && pos < frontMatterMax; first = false {
		end := strings.IndexByte(rest[pos:], '\n')
		if end < 0 {
			end = len(rest) - pos
		}
		line := strings.TrimRight(rest[pos:pos+end], " \t")
		next := min(len(rest), pos+end+1)
		switch {
		case line == "---" || line == "...":
			if first {
				return text // "---\n---": two rules, no front matter
			}
			body := strings.TrimLeft(rest[next:], "\n")
			if title != "" {
				return "# " + title + "\n\n" + body
			}
			return body
		case first && !yamlKey(line):
			return text
		}
		if v, ok := strings.CutPrefix(line, "title:"); ok {
			if v = strings.TrimSpace(v); v != "" && v[0] != '|' && v[0] != '>' { // not a block scalar
				title = strings.Join(strings.Fields(strings.Trim(v, `"'`)), " ")
			}
		}
		pos = next
	}
	return text
}

// frontMatterMax bounds the front matter dropFrontMatter looks for.
const frontMatterMax = 64 << 10

// yamlKey reports whether line starts a YAML mapping entry: "key:" and a space or
// nothing after it.
func yamlKey(line string) bool {
	k, v, ok := strings.Cut(line, ":")
	if !ok || k == "" || (v != "" && v[0] != ' ') {
		return false
	}
	for _, r := range k {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// normalizeNewlines turns "\r\n" and lone "\r" into "\n".
func normalizeNewlines(s string) string {
	if !strings.Contains(s, "\r") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
}

// convertText turns plain text into Markdown that reads as the same text: lines
// Markdown would take for a heading, a fence, a rule or a quote are escaped with a
// backslash; blank lines keep separating paragraphs.
func convertText(text string) string {
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		trimmed := strings.TrimLeft(line, " \t")
		if trimmed == "" {
			continue
		}
		switch trimmed[0] {
		case '#', '`', '~', '>', '|', '=', '-', '*', '_', '+':
			lines[i] = line[:len(line)-len(trimmed)] + `\` + trimmed
		}
	}
	return strings.Join(lines, "\n")
}

// fence returns a run of backticks longer than any run inside content (at least
// three), so the fence cannot be closed by the content.
func fence(content string) string {
	longest, run := 0, 0
	for i := 0; i < len(content); i++ {
		if content[i] == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return strings.Repeat("`", max(3, longest+1))
}

// codeBlock renders content as "# title" and a fenced block with info string lang.
func codeBlock(title, lang, content string) string {
	f := fence(content)
	content = strings.TrimRight(content, "\n")
	return "# " + title + "\n\n" + f + lang + "\n" + content + "\n" + f + "\n"
}

// convertJSON pretty-prints a JSON document under a heading of the file name.
// The document stays one fenced block rather than a heading per key: keys are often
// data (IDs, dates), and Pack cuts a long block at its lines anyway.
func convertJSON(name string, data []byte) (string, error) {
	var out bytes.Buffer
	if err := json.Indent(&out, data, "", "  "); err != nil {
		return "", fmt.Errorf("invalid JSON: %w: %w", ErrMalformed, err)
	}
	return codeBlock(path.Base(name), "json", out.String()), nil
}

// convertCSV renders a CSV document as a Markdown table whose first record is the
// header. Records may have different lengths; short ones are padded.
func convertCSV(text string) (string, error) {
	r := csv.NewReader(strings.NewReader(strings.TrimPrefix(text, "\ufeff")))
	r.FieldsPerRecord = -1
	r.LazyQuotes = true
	var (
		rows   [][]string
		budget tableBudget
	)
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("invalid CSV: %w: %w", ErrMalformed, err)
		}
		if err := budget.add(rec); err != nil {
			return "", fmt.Errorf("CSV: %w", err)
		}
		rows = append(rows, rec)
	}
	return markdownTable(rows)
}

// tableBudget follows the size of the Markdown table that rows arriving one by
// one would make, so that a table too large is refused before it is written. A
// table is as wide as its widest row: one long header row over many short rows
// gives a table far larger than its source ("a,,,,…" then "b\n" a million times;
// a spreadsheet with one cell at XFD1048576), and each row writes at least
// " |" per column.
type tableBudget struct {
	rows, width, cellBytes int
}

// add counts a row and fails with ErrTooLarge once the table's Markdown would
// pass MaxMarkdownBytes.
func (t *tableBudget) add(row []string) error {
	t.rows++
	t.width = max(t.width, len(row))
	for _, c := range row {
		t.cellBytes += len(c)
	}
	return t.check()
}

// addEmpty counts n rows without a cell.
func (t *tableBudget) addEmpty(n int) error {
	t.rows += n
	return t.check()
}

// check fails with ErrTooLarge once the table's Markdown would pass
// MaxMarkdownBytes.
func (t *tableBudget) check() error {
	if n := t.size(); n > MaxMarkdownBytes || n < 0 {
		return fmt.Errorf("a table of %d rows by %d columns gives Markdown beyond %d bytes: %w", t.rows, t.width, MaxMarkdownBytes, ErrTooLarge)
	}
	return nil
}

// size is the least size of the Markdown of the rows counted, every row and
// column written: each of rows+1 lines (the header's rule too) is "|", " x |"
// per column and "\n", at least 3 bytes a column and 2 a line, beside the cells'
// text. It bounds the work of reading them too, whatever markdownTable leaves out.
func (t *tableBudget) size() int {
	return (t.rows+1)*(3*t.width+2) + t.cellBytes
}

// markdownTable renders rows as a GFM table, the first row with text as its
// header. Rows and columns without text (a spreadsheet's formatted empty cells,
// a CSV's ",,,") are left out: they say nothing, and a sheet formatted down to
// row 20,000 gave thousands of lines of "|  |  |", hundreds of chunks to embed.
// Pipes are escaped and line breaks inside a cell become "<br>", so every row
// stays one line. Rows without text give "". A table whose Markdown would pass
// MaxMarkdownBytes is refused with ErrTooLarge before it is written.
func markdownTable(rows [][]string) (string, error) {
	var budget tableBudget
	for _, r := range rows {
		if err := budget.add(r); err != nil {
			return "", err
		}
	}
	var cols []int // the columns with text
	for i := range budget.width {
		for _, r := range rows {
			if i < len(r) && strings.TrimSpace(r[i]) != "" {
				cols = append(cols, i)
				break
			}
		}
	}
	if len(cols) == 0 {
		return "", nil
	}
	var b strings.Builder
	header := true
	for _, r := range rows {
		if !hasText(r) {
			continue
		}
		b.WriteString("|")
		for _, i := range cols {
			cell := ""
			if i < len(r) {
				cell = tableCell(r[i])
			}
			b.WriteString(" " + cell + " |")
		}
		b.WriteString("\n")
		if header {
			b.WriteString("|" + strings.Repeat(" --- |", len(cols)) + "\n")
			header = false
		}
	}
	return b.String(), nil
}

// hasText reports whether a table row has a cell with text.
func hasText(row []string) bool {
	return slices.ContainsFunc(row, func(c string) bool { return strings.TrimSpace(c) != "" })
}

// tableCell escapes a cell's text for a one-line GFM table cell.
func tableCell(s string) string {
	s = strings.TrimSpace(normalizeNewlines(s))
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", "<br>")
}
