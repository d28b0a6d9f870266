//go:build review

package main

import (
	"bytes"
	"compress/gzip"
	"os"
	"strings"
	"testing"
)

// An export as users get it back: saved by a Windows editor with a byte order mark,
// or gzip'd to be mailed, imports as the export it is.
func TestImportTakesAnExportWithABOMOrGzipped(t *testing.T) {
	for name, edit := range map[string]func([]byte) []byte{
		"BOM": func(g []byte) []byte { return append([]byte("\ufeff"), g...) },
		"BOM and CRLF": func(g []byte) []byte {
			return append([]byte("\ufeff"), bytes.ReplaceAll(g, []byte("\n"), []byte("\r\n"))...)
		},
		"gzip": func(g []byte) []byte {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(g)
			zw.Close()
			return b.Bytes()
		},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errs, _ := importGoldenAs(t, edit)
			if code != 0 || !strings.Contains(out, "imported session") {
				t.Fatalf("import: %d %s %s", code, out, errs)
			}
		})
	}
}

// Two exports in one file (cat a.jsonl b.jsonl) are refused with an error that says
// so at the second header's line, not that line 10 is an envelope missing its id.
func TestImportNamesASecondExportInTheFile(t *testing.T) {
	code, _, errs, dir := importGoldenAs(t, func(g []byte) []byte { return append(append([]byte{}, g...), g...) })
	if code != 1 || !strings.Contains(errs, "line 10") || !strings.Contains(errs, "8 events") || strings.Contains(errs, "missing id") {
		t.Fatalf("import of two exports in one file: %d %s", code, errs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a rejected import wrote %d files", len(entries))
	}
}
