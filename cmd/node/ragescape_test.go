package main

import (
	"strings"
	"testing"
)

// node rag prints what documents hold (headings, passages, the answer quoting
// them) and what folders hold (file names) with their escape sequences shown
// escaped, as node memory prints a memory's content: a heading or a file name with
// ESC or BEL cleared the terminal or set its title when printed.
func TestRagPrintsNoEscapeSequences(t *testing.T) {
	data := memoryCLIEnv(t)
	writeFiles(t, map[string]string{
		"docs/guide.md":          "# Install \x1b]0;pwned\x07 guide\n\nDownload the tarball \x1b[2J and run node serve.\n",
		"docs/bad\x1b[31mred.md": "hello",
	})
	for _, args := range [][]string{
		{"add", "--kb", "docs", "--data", data, "docs"},
		{"search", "--kb", "docs", "--data", data, "tarball"},
		{"ask", "--extractive", "--kb", "docs", "--data", data, "how to download the tarball"},
		{"list", "--kb", "docs", "--data", data},
	} {
		_, out, errs := nodeRag(t, args...)
		if strings.ContainsAny(out+errs, "\x1b\x07") {
			t.Errorf("node rag %s printed an escape sequence:\nstdout %q\nstderr %q", args[0], out, errs)
		}
	}
}
