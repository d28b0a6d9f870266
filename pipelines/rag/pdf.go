package rag

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/ledongthuc/pdf"
)

// convertPDF extracts the text of each page with github.com/ledongthuc/pdf, a pure
// Go reader, under a heading "# Page n" so a chunk's heading path names its page.
// It reads text only: no layout, no tables, and a scanned page (an image) gives no
// text. Encrypted PDFs are refused. The reader panics on some malformed files; that
// is recovered into ErrMalformed.
func convertPDF(data []byte) (md string, err error) {
	defer func() {
		if r := recover(); r != nil {
			md, err = "", fmt.Errorf("PDF reader failed: %v: %w", r, ErrMalformed)
		}
	}()
	r, err := pdf.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return "", fmt.Errorf("PDF: %w: %w", ErrMalformed, err)
	}
	var out strings.Builder
	for i := 1; i <= r.NumPage(); i++ {
		page := r.Page(i)
		if page.V.IsNull() {
			continue
		}
		text, err := page.GetPlainText(nil)
		if err != nil {
			return "", fmt.Errorf("PDF page %d: %w: %w", i, ErrMalformed, err)
		}
		text = strings.TrimSpace(normalizeNewlines(strings.ToValidUTF8(text, "\uFFFD")))
		if text == "" {
			continue
		}
		if out.Len() > 0 {
			out.WriteString("\n")
		}
		out.WriteString("# Page " + strconv.Itoa(i) + "\n\n" + convertText(text) + "\n")
		if out.Len() > MaxMarkdownBytes {
			return "", fmt.Errorf("PDF gives Markdown beyond %d bytes: %w", MaxMarkdownBytes, ErrTooLarge)
		}
	}
	return out.String(), nil
}
