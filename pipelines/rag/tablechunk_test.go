package rag

import (
	"fmt"
	"strings"
	"testing"
)

// A table longer than a chunk is cut between rows; each chunk of it after the
// first must still start with the table's header row and its separator, or its
// rows are numbers under no column names (a spreadsheet's sheet, a long HTML
// table): a query naming a column does not find them, a model reading them cannot
// tell one column from another, and the text is no Markdown table any more.
func TestPackRepeatsATablesHeaderInEveryChunkOfIt(t *testing.T) {
	const header = "| Service | Port | Protocol |\n| --- | --- | --- |"
	var sb strings.Builder
	sb.WriteString("# Ports\n\nThe services listen on these ports.\n\n" + header + "\n")
	for i := range 300 {
		fmt.Fprintf(&sb, "| service-%d | %d | tcp |\n", i, 8000+i)
	}
	md := sb.String()
	for _, opts := range []ChunkOptions{{}, {MaxTokens: 64, OverlapTokens: -1}, {MaxTokens: 100, OverlapTokens: 30}} {
		cs := Pack(Split(md), opts)
		max := opts.MaxTokens
		if max == 0 {
			max = DefaultMaxTokens
		}
		rows := map[string]bool{}
		tables := 0
		for i, c := range cs {
			if c.Tokens > max || defaultTokenizer.Count(c.Text) != c.Tokens {
				t.Errorf("%+v: chunk %d: %d tokens (counted %d), over %d", opts, i, c.Tokens, defaultTokenizer.Count(c.Text), max)
			}
			if !strings.Contains(c.Text, "| service-") {
				continue
			}
			tables++
			if !strings.HasPrefix(c.Text, header+"\n") && !strings.Contains(c.Text, "\n\n"+header+"\n") {
				t.Errorf("%+v: chunk %d of the table lacks its header: %.120q", opts, i, c.Text)
			}
			if strings.Count(c.Text, "| Service |") != 1 {
				t.Errorf("%+v: chunk %d holds the header %d times", opts, i, strings.Count(c.Text, "| Service |"))
			}
			for _, l := range strings.Split(c.Text, "\n") {
				if strings.HasPrefix(l, "| service-") {
					rows[l] = true
				}
			}
		}
		if tables < 2 || len(rows) != 300 {
			t.Errorf("%+v: %d chunks of the table, %d rows of 300", opts, tables, len(rows))
		}
	}
}

// An HTML table without <th> converts to a Markdown table whose header row is
// empty: it names no column, so its chunks do not repeat it (it cost each chunk
// its tokens for nothing); every row is still in one chunk or another.
func TestPackDoesNotRepeatAnEmptyHeader(t *testing.T) {
	var sb strings.Builder
	sb.WriteString("<table>")
	for i := range 300 {
		fmt.Fprintf(&sb, "<tr><td>service-%d</td><td>%d</td></tr>", i, 8000+i)
	}
	sb.WriteString("</table>")
	md, err := Convert("ports.html", []byte(sb.String()))
	if err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(md, "\n")
	if !strings.HasPrefix(md, "|") || strings.Trim(head, "| ") != "" {
		t.Fatalf("the converter's table: %.60q, want an empty header row", md)
	}
	cs := Pack(Split(md), ChunkOptions{MaxTokens: 64, OverlapTokens: -1})
	rows := 0
	for i, c := range cs {
		if i > 0 && strings.HasPrefix(c.Text, head) {
			t.Errorf("chunk %d repeats the empty header: %.60q", i, c.Text)
		}
		rows += strings.Count(c.Text, "| service-")
	}
	if len(cs) < 2 || rows != 300 {
		t.Fatalf("%d chunks, %d rows of 300", len(cs), rows)
	}
}
