package rag

import (
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// pdfWithFontsInAnObjectStream builds a PDF 1.5 of one page that shows text in
// the last of names fonts. Its fonts (objects 8 to fonts+7; the font named F i
// is font i modulo fonts) and then its page (object 3) are compressed in one
// object stream (object 4), whose header first lists pad entries naming object
// 1 (which the cross-reference stream, object 5, places outside it) before the
// entries of its own objects. Every font name costs the converter a look-up of
// an object of the stream. With indirect, the page's font dictionary is an
// object of the stream too (object 6) that the page refers to.
func pdfWithFontsInAnObjectStream(fonts, names, pad int, indirect ...bool) []byte {
	fontDict := len(indirect) > 0 && indirect[0]
	const text = "Hello object streams"
	content := fmt.Sprintf("BT /F%d 24 Tf 72 720 Td (%s) Tj ET", names-1, text)
	var page strings.Builder
	var dict strings.Builder
	dict.WriteString("<<")
	for i := range names {
		fmt.Fprintf(&dict, " /F%d %d 0 R", i, 8+i%fonts)
	}
	dict.WriteString(" >>")
	page.WriteString("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 7 0 R /Resources << /Font ")
	if fontDict {
		page.WriteString("6 0 R")
	} else {
		page.WriteString(dict.String())
	}
	page.WriteString(" >> >>")
	// The object stream: objects 8 to fonts+7 (the fonts), then object 3 (the
	// page), then object 6 (the font dictionary) if indirect.
	var objs []string
	var ids []int
	for i := range fonts {
		objs = append(objs, pdfFont)
		ids = append(ids, 8+i)
	}
	objs = append(objs, page.String())
	ids = append(ids, 3)
	if fontDict {
		objs = append(objs, dict.String())
		ids = append(ids, 6)
	}
	var header, body bytes.Buffer
	for i, o := range objs {
		fmt.Fprintf(&header, "%d %d ", ids[i], body.Len())
		body.WriteString(o + "\n")
	}
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	padding := []byte(strings.Repeat("1 0 ", 1<<14))
	for left := pad; left > 0; left -= 1 << 14 {
		zw.Write(padding[:4*min(left, 1<<14)])
	}
	zw.Write(header.Bytes())
	zw.Write(body.Bytes())
	zw.Close()
	first := 4*pad + header.Len()

	var b bytes.Buffer
	b.WriteString("%PDF-1.5\n")
	offsets := map[int]int{}
	obj := func(id int, format string, args ...any) {
		offsets[id] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n", id)
		fmt.Fprintf(&b, format, args...)
		b.WriteString("\nendobj\n")
	}
	obj(1, "<< /Type /Catalog /Pages 2 0 R >>")
	obj(2, "<< /Type /Pages /Kids [3 0 R] /Count 1 >>")
	obj(4, "<< /Type /ObjStm /N %d /First %d /Filter /FlateDecode /Length %d >>\nstream\n%s\nendstream",
		pad+len(objs), first, z.Len(), z.Bytes())
	obj(7, "<< /Length %d >>\nstream\n%s\nendstream", len(content), content)
	// Entries of widths 1, 4 and 4 bytes: type, offset or stream, generation or index.
	size := 8 + fonts
	var x bytes.Buffer
	entry := func(typ byte, f2, f3 uint32) {
		x.Write([]byte{typ, byte(f2 >> 24), byte(f2 >> 16), byte(f2 >> 8), byte(f2), byte(f3 >> 24), byte(f3 >> 16), byte(f3 >> 8), byte(f3)})
	}
	xref := b.Len()
	offsets[5] = xref
	for id := range size {
		switch {
		case id == 6 && fontDict:
			entry(2, 4, uint32(pad+fonts+1))
		case id == 0 || id == 6:
			entry(0, 0, 0)
		case id == 3:
			entry(2, 4, uint32(pad+fonts))
		case id >= 8:
			entry(2, 4, uint32(pad+id-8))
		default:
			entry(1, uint32(offsets[id]), 0)
		}
	}
	z.Reset()
	zw = zlib.NewWriter(&z)
	zw.Write(x.Bytes())
	zw.Close()
	fmt.Fprintf(&b, "5 0 obj\n<< /Type /XRef /Size %d /W [1 4 4] /Root 1 0 R /Filter /FlateDecode /Length %d >>\nstream\n", size, z.Len())
	b.Write(z.Bytes())
	fmt.Fprintf(&b, "\nendstream\nendobj\nstartxref\n%d\n%%%%EOF\n", xref)
	return b.Bytes()
}

// A page with 100,000 fonts, all in one object stream: each is looked up
// (twice). A reader that decodes the object stream from its start again for
// every look-up does work quadratic in the stream's size: here it reads the
// 1.1 MB file over and over until the read budget refuses it (ErrTooLarge,
// "going round a cycle"), after 5 s of CPU. The second file is an attacker's
// version of the same: 100,000 names of one font placed after a header of a
// million entries that compresses to a few KB, so that each look-up costs
// little of the read budget and much CPU; without a cache of decoded object
// streams it runs past the test timeout (more than 350 s of CPU). With the
// cache each file's object stream is decoded once.
func TestConvertPDFDecodesEachObjectStreamOnce(t *testing.T) {
	for _, c := range []struct {
		name              string
		fonts, names, pad int
	}{
		{"100,000 objects", 100000, 100000, 0},
		{"padded header", 1, 100000, 1000000},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := pdfWithFontsInAnObjectStream(c.fonts, c.names, c.pad)
			md, err := Convert("a.pdf", data)
			if err != nil || md != "# Page 1\n\nHello object streams\n" {
				t.Fatalf("Convert(%d-byte PDF) = %q, %v", len(data), md, err)
			}
		})
	}
}

// An object stream of 64 KB that decodes to more than MaxPDFObjectStreamBytes
// (a header of 17 million entries) is refused: the reader keeps its object
// streams decoded. (A reader that decodes the stream for each look-up reads
// the one font it holds, through the whole header each time.)
// A page whose font dictionary, of 100,000 fonts, is an object of its own: the
// converter resolves the dictionary once, not once per font (which parsed it
// 100,000 times, until the budget of objects parsed refused the file).
func TestConvertPDFResolvesAFontDictionaryOnce(t *testing.T) {
	data := pdfWithFontsInAnObjectStream(100000, 100000, 0, true)
	md, err := Convert("a.pdf", data)
	if err != nil || md != "# Page 1\n\nHello object streams\n" {
		t.Fatalf("Convert(%d-byte PDF) = %q, %v", len(data), md, err)
	}
}

func TestConvertPDFRefusesAnObjectStreamBomb(t *testing.T) {
	data := pdfWithFontsInAnObjectStream(1, 1, MaxPDFObjectStreamBytes/4+1)
	_, err := Convert("a.pdf", data)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprint(MaxPDFObjectStreamBytes)) {
		t.Fatalf("Convert(object stream bomb of %d bytes) = %v, want ErrTooLarge naming the limit", len(data), err)
	}
}

// BenchmarkConvertPDFObjectStream converts a page of n fonts that share one
// object stream, each looked up twice: the time per PDF grows with n when
// each object stream is decoded once, with n squared when it is decoded again
// for every look-up.
func BenchmarkConvertPDFObjectStream(b *testing.B) {
	for _, n := range []int{1000, 4000, 16000} {
		data := pdfWithFontsInAnObjectStream(n, n, 0)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := Convert("a.pdf", data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// An object stream whose /Length is an object inside it: to find its length
// the reader decodes it, which needs its length. Without the check in
// internal/pdf this recursion ends only when the read budget is spent, deep
// in the stack.
func TestConvertPDFRefusesAnObjectStreamThatNeedsItself(t *testing.T) {
	page := "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R /Resources << /Font << /F1 4 0 R >> >> >>"
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [5 0 R] /Count 1 >>",
		pdfText("Hello"), pdfFont,
	}
	var b bytes.Buffer
	b.WriteString("%PDF-1.5\n")
	offsets := make([]int, len(objs))
	for i, o := range objs {
		offsets[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	body := page + "\n" + "0\n"
	header := fmt.Sprintf("5 0 8 %d ", len(page)+1)
	objStm := b.Len()
	fmt.Fprintf(&b, "7 0 obj\n<< /Type /ObjStm /N 2 /First %d /Length 8 0 R >>\nstream\n%s%s\nendstream\nendobj\n",
		len(header), header, body)
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
	entry(1, uint32(objStm), 0)
	entry(2, 7, 1)
	fmt.Fprintf(&b, "6 0 obj\n<< /Type /XRef /Size 9 /W [1 4 2] /Root 1 0 R /Length %d >>\nstream\n", x.Len())
	b.Write(x.Bytes())
	fmt.Fprintf(&b, "\nendstream\nendobj\nstartxref\n%d\n%%%%EOF\n", xref)
	_, err := Convert("a.pdf", b.Bytes())
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "needed to decode itself") {
		t.Fatalf("Convert(object stream whose /Length is inside it) = %v, want ErrMalformed naming the stream", err)
	}
}
