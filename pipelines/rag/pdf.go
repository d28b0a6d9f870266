package rag

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/troupe-run/troupe/internal/pdf"
)

// convertPDF extracts the text of each page with internal/pdf, a pure Go reader
// (a copy of github.com/ledongthuc/pdf that decodes each object stream once),
// under a heading "# Page n" so a chunk's heading path names its page.
// It reads text only: no layout, no tables, and a scanned page (an image) gives no
// text. Encrypted PDFs are refused. The reader panics on some malformed files; that
// is recovered into ErrMalformed.
//
// The pages are found by walking the page tree here rather than with the reader's
// Page(n), which trusts each node's /Count: a tree whose node lists itself as its
// kid sends it round forever, a /Count of 10^12 makes it look up 10^12 pages, and
// each lookup walks the tree from its root again. The walk visits at most
// MaxPDFTreeNodes nodes and MaxPDFPages pages, and the page content and font
// streams the reader will decode may expand to MaxUnzippedBytes in all. The
// reader may read MaxPDFOpenBytes plus 64 times the file's size from the file to
// open it, and MaxPDFReadBytes plus 64 times its size to read its pages, which
// ends the loops it would go round in a cyclic file. It decodes each object
// stream once, and keeps them decoded up to MaxPDFObjectStreamBytes in all; the
// objects it parses from them again as it resolves them count against a
// budget of the same size as its reads. It refuses an object stream inside an
// object stream or needed to decode itself, which github.com/ledongthuc/pdf
// recursed into until the goroutine's stack overflowed, a fatal error that
// takes the whole process down and that recover cannot stop.
func convertPDF(data []byte) (md string, err error) {
	// Opening reads the cross-reference sections, each once in a sound file;
	// reading the pages rereads objects as they are resolved.
	open, read := MaxPDFOpenBytes+64*int64(len(data)), MaxPDFReadBytes+64*int64(len(data))
	file := &readBudget{r: bytes.NewReader(data), left: open, limit: open}
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok && errors.Is(e, pdf.ErrLimit) {
				md, err = "", fmt.Errorf("PDF: %w: %w", e, ErrTooLarge)
			} else {
				md, err = "", fmt.Errorf("PDF reader failed: %v: %w", r, ErrMalformed)
			}
		}
		// Spent even when the reader got by: a stream cut short by the
		// budget may have been read as ending there.
		if file.spent {
			md, err = "", fmt.Errorf("PDF reader read more than %d bytes of a %d-byte file, going round a cycle (of /Prev, /Parent or object streams): %w",
				file.limit, len(data), ErrTooLarge)
		}
	}()
	r, err := pdf.NewReader(file, int64(len(data)))
	if err != nil {
		return "", fmt.Errorf("PDF: %w: %w", ErrMalformed, err)
	}
	r.SetObjectStreamLimits(MaxPDFObjectStreamBytes, read)
	file.left, file.limit = read, read
	pages, err := pdfPages(r.Trailer().Key("Root").Key("Pages"))
	if err != nil {
		return "", fmt.Errorf("PDF: %w", err)
	}
	budget := &boundedReader{n: MaxUnzippedBytes}
	var out strings.Builder
	for i, v := range pages {
		page := pdf.Page{V: v}
		if err := pdfStreamsFit(page, budget); err != nil {
			return "", fmt.Errorf("PDF page %d: %w", i+1, err)
		}
		text, err := page.GetPlainText(nil)
		if errors.Is(err, pdf.ErrLimit) {
			return "", fmt.Errorf("PDF page %d: %w: %w", i+1, err, ErrTooLarge)
		}
		if err != nil {
			return "", fmt.Errorf("PDF page %d: %w: %w", i+1, ErrMalformed, err)
		}
		text = strings.TrimSpace(normalizeNewlines(strings.ToValidUTF8(text, "\uFFFD")))
		if text == "" {
			continue
		}
		if out.Len() > 0 {
			out.WriteString("\n")
		}
		out.WriteString("# Page " + strconv.Itoa(i+1) + "\n\n" + convertText(text) + "\n")
		if out.Len() > MaxMarkdownBytes {
			return "", fmt.Errorf("PDF gives Markdown beyond %d bytes: %w", MaxMarkdownBytes, ErrTooLarge)
		}
	}
	return out.String(), nil
}

// readBudget is the PDF file as the reader sees it: it fails every read once
// left bytes have been read. The reader follows chains inside the file (the
// /Prev of each cross-reference section, the /Extends of each object stream)
// without noticing a cycle; each turn reads the file again, so the budget ends
// the loop.
type readBudget struct {
	r     io.ReaderAt
	left  int64
	limit int64 // the budget left started from, for the error
	spent bool
}

func (b *readBudget) ReadAt(p []byte, off int64) (int, error) {
	if b.left <= 0 {
		b.spent = true
		return 0, errLimit
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.ReadAt(p, off)
	b.left -= int64(n)
	return n, err
}

// pdfPages returns the leaves (/Type /Page) of the page tree under root, in
// order, walking without recursion. It fails with ErrTooLarge past MaxPDFPages
// pages or MaxPDFTreeNodes visited nodes, which a cycle in the tree reaches too.
func pdfPages(root pdf.Value) ([]pdf.Value, error) {
	var pages []pdf.Value
	stack := []pdf.Value{root}
	for visited := 0; len(stack) > 0; visited++ {
		if visited >= MaxPDFTreeNodes {
			return nil, fmt.Errorf("page tree of more than %d nodes (or a cycle): %w", MaxPDFTreeNodes, ErrTooLarge)
		}
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch n.Key("Type").Name() {
		case "Page":
			if len(pages) >= MaxPDFPages {
				return nil, fmt.Errorf("more than %d pages: %w", MaxPDFPages, ErrTooLarge)
			}
			pages = append(pages, n)
		case "Pages":
			kids := n.Key("Kids")
			if len(stack)+kids.Len() > MaxPDFTreeNodes {
				return nil, fmt.Errorf("page tree of more than %d nodes: %w", MaxPDFTreeNodes, ErrTooLarge)
			}
			// Pushed last first, so the first kid is visited first.
			for i := kids.Len() - 1; i >= 0; i-- {
				stack = append(stack, kids.Index(i))
			}
		}
	}
	return pages, nil
}

// pdfStreamsFit decodes the streams GetPlainText will decode for a page (its
// content streams and its fonts' ToUnicode maps) through budget, shared by all
// pages, and fails with ErrTooLarge once they expand beyond MaxUnzippedBytes in
// all: a few KB of Flate can expand to GBs, which the reader would interpret to
// the end.
func pdfStreamsFit(page pdf.Page, budget *boundedReader) error {
	var streams []pdf.Value
	contents := page.V.Key("Contents")
	if contents.Kind() == pdf.Array {
		for i := 0; i < contents.Len(); i++ {
			streams = append(streams, contents.Index(i))
		}
	} else {
		streams = append(streams, contents)
	}
	fonts := page.Resources().Key("Font")
	for _, name := range fonts.Keys() {
		streams = append(streams, fonts.Key(name).Key("ToUnicode"))
	}
	for _, s := range streams {
		if s.Kind() != pdf.Stream {
			continue
		}
		rc := s.Reader()
		budget.r = rc
		_, err := io.Copy(io.Discard, budget)
		rc.Close()
		if errors.Is(err, errLimit) {
			return fmt.Errorf("streams expand beyond %d bytes: %w", MaxUnzippedBytes, ErrTooLarge)
		}
		if err != nil {
			return fmt.Errorf("stream: %w: %w", ErrMalformed, err)
		}
	}
	return nil
}
