package pdf

import (
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// testObjStm is an object stream for testPDF: its objects, by number, in order
// (a number may come twice), the stream it extends (0 for none), and its
// /Length if not the number of its bytes.
type testObjStm struct {
	id      int
	ids     []int
	objs    []string
	extends int
	length  string
}

// testPDF builds a PDF 1.5 of object 1, "<< /Type /Catalog >>", and the given
// object streams (Flate-compressed), listed by a cross-reference stream. An
// object listed in several streams is placed by the cross-reference stream in
// the first.
func testPDF(streams ...testObjStm) []byte {
	var b bytes.Buffer
	b.WriteString("%PDF-1.5\n")
	size := 2
	type place struct{ typ, f2, f3 int }
	places := map[int]place{1: {1, b.Len(), 0}}
	b.WriteString("1 0 obj\n<< /Type /Catalog >>\nendobj\n")
	for _, s := range streams {
		var header, body bytes.Buffer
		for i, id := range s.ids {
			fmt.Fprintf(&header, "%d %d ", id, body.Len())
			body.WriteString(s.objs[i] + "\n")
			if _, ok := places[id]; !ok {
				places[id] = place{2, s.id, i}
			}
			size = max(size, id+1)
		}
		var z bytes.Buffer
		zw := zlib.NewWriter(&z)
		zw.Write(header.Bytes())
		zw.Write(body.Bytes())
		zw.Close()
		ext := ""
		if s.extends != 0 {
			ext = fmt.Sprintf(" /Extends %d 0 R", s.extends)
		}
		length := s.length
		if length == "" {
			length = fmt.Sprint(z.Len())
		}
		places[s.id] = place{1, b.Len(), 0}
		size = max(size, s.id+1)
		fmt.Fprintf(&b, "%d 0 obj\n<< /Type /ObjStm /N %d /First %d%s /Filter /FlateDecode /Length %s >>\nstream\n",
			s.id, len(s.ids), header.Len(), ext, length)
		b.Write(z.Bytes())
		b.WriteString("\nendstream\nendobj\n")
	}
	xrefID := size
	xref := b.Len()
	places[xrefID] = place{1, xref, 0}
	var x bytes.Buffer
	for id := 0; id <= xrefID; id++ {
		p := places[id]
		x.Write([]byte{byte(p.typ), byte(p.f2 >> 24), byte(p.f2 >> 16), byte(p.f2 >> 8), byte(p.f2), byte(p.f3 >> 8), byte(p.f3)})
	}
	fmt.Fprintf(&b, "%d 0 obj\n<< /Type /XRef /Size %d /W [1 4 2] /Root 1 0 R /Length %d >>\nstream\n", xrefID, xrefID+1, x.Len())
	b.Write(x.Bytes())
	fmt.Fprintf(&b, "\nendstream\nendobj\nstartxref\n%d\n%%%%EOF\n", xref)
	return b.Bytes()
}

// countingFile counts the bytes read from a file.
type countingFile struct {
	r    *bytes.Reader
	read int64
}

func (f *countingFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.r.ReadAt(p, off)
	f.read += int64(n)
	return n, err
}

// lookUp returns object id of r, or the error a look-up panics with.
func lookUp(r *Reader, id int) (v Value, err error) {
	defer func() {
		if x := recover(); x != nil {
			err = fmt.Errorf("%v", x)
			if e, ok := x.(error); ok {
				err = e
			}
		}
	}()
	return r.resolve(objptr{}, objptr{uint32(id), 0}), nil
}

func openTestPDF(t *testing.T, data []byte) (*Reader, *countingFile) {
	t.Helper()
	f := &countingFile{r: bytes.NewReader(data)}
	r, err := NewReader(f, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	f.read = 0
	return r, f
}

// Looking up each of 2,000 objects of one object stream reads the file about
// once: the stream is decoded once. Decoding it again for each look-up (as
// github.com/ledongthuc/pdf does) reads it about 1,000 times.
func TestObjectStreamIsDecodedOnce(t *testing.T) {
	s := testObjStm{id: 2}
	for i := range 2000 {
		s.ids = append(s.ids, 3+i)
		s.objs = append(s.objs, fmt.Sprintf("<< /N %d >>", i))
	}
	data := testPDF(s)
	r, f := openTestPDF(t, data)
	for i := range 2000 {
		v, err := lookUp(r, 3+i)
		if err != nil || v.Key("N").Int64() != int64(i) {
			t.Fatalf("object %d = %v, %v; want << /N %d >>", 3+i, v, err, i)
		}
	}
	if f.read > 2*int64(len(data)) {
		t.Fatalf("looking up 2,000 objects read %d bytes of a %d-byte file; want the object stream read once", f.read, len(data))
	}
}

// An object listed twice in an object stream's header is the first, as when
// the header was read from its start. An object missing from a stream is
// looked for in the stream it extends.
func TestObjectStreamLookUp(t *testing.T) {
	data := testPDF(
		testObjStm{id: 2, ids: []int{5, 4, 5}, objs: []string{"(first)", "(four)", "(second)"}, extends: 3},
		testObjStm{id: 3, ids: []int{6}, objs: []string{"(six)"}},
	)
	r, _ := openTestPDF(t, data)
	// The cross-reference stream places object 6 in stream 3; place it in
	// stream 2 instead, which extends stream 3.
	r.xref[6].stream = objptr{2, 0}
	for id, want := range map[int]string{5: "first", 4: "four", 6: "six"} {
		if v, err := lookUp(r, id); err != nil || v.RawString() != want {
			t.Errorf("object %d = %v, %v; want (%s)", id, v, err, want)
		}
	}
}

// An object stream that extends itself: without the cycle check each turn
// of the search costs nothing (the stream is decoded already), so it never
// ends.
func TestObjectStreamExtendsCycle(t *testing.T) {
	data := testPDF(
		testObjStm{id: 2, ids: []int{4}, objs: []string{"(four)"}, extends: 3},
		testObjStm{id: 3, ids: []int{5}, objs: []string{"(five)"}, extends: 2},
	)
	r, _ := openTestPDF(t, data)
	r.xref[6] = xref{ptr: objptr{6, 0}, inStream: true, stream: objptr{2, 0}}
	if _, err := lookUp(r, 6); err == nil || !strings.Contains(err.Error(), "a cycle of /Extends") {
		t.Fatalf("object 6 (in no stream of a cycle of /Extends): %v, want an error naming the cycle", err)
	}
}

// An object stream listed inside itself is refused, not recursed into until
// the stack overflows (a fatal error).
func TestObjectStreamInsideItself(t *testing.T) {
	data := testPDF(testObjStm{id: 2, ids: []int{3}, objs: []string{"(three)"}})
	r, _ := openTestPDF(t, data)
	r.xref[2] = xref{ptr: objptr{2, 0}, inStream: true, stream: objptr{2, 0}}
	if _, err := lookUp(r, 3); err == nil || !strings.Contains(err.Error(), "itself in an object stream") {
		t.Fatalf("object 3 (in a stream inside itself): %v, want an error naming the nesting", err)
	}
}

// Past either limit of SetObjectStreamLimits a look-up fails with ErrLimit:
// the decoded streams' size (two streams of 1,000 objects of 11 bytes, each
// about 20 KB decoded and an index of 16 KB), and the bytes parsed from them
// (an object looked up again counts again).
func TestObjectStreamLimits(t *testing.T) {
	a, b := testObjStm{id: 2}, testObjStm{id: 3}
	for i := range 1000 {
		a.ids, a.objs = append(a.ids, 4+i), append(a.objs, "<< /A 1 >>")
		b.ids, b.objs = append(b.ids, 1004+i), append(b.objs, "<< /B 1 >>")
	}
	data := testPDF(a, b)

	r, _ := openTestPDF(t, data)
	r.SetObjectStreamLimits(50<<10, 1<<30)
	if _, err := lookUp(r, 4); err != nil {
		t.Fatalf("object 4 under a limit of 50 KB: %v", err)
	}
	if _, err := lookUp(r, 1004); !errors.Is(err, ErrLimit) {
		t.Fatalf("object 1004 (in a second stream) under a limit of 50 KB: %v, want ErrLimit", err)
	}

	r, _ = openTestPDF(t, data)
	r.SetObjectStreamLimits(1<<20, 500)
	for i := range 100 {
		_, err := lookUp(r, 4)
		if i < 20 && err != nil || i == 99 && !errors.Is(err, ErrLimit) {
			t.Fatalf("look-up %d of an 11-byte object under a parse limit of 500 bytes: %v", i+1, err)
		}
	}
}

// An object stream whose /Length is an object inside it: decoding it needs
// it decoded. Without the check the look-up recurses until the stack
// overflows, a fatal error.
func TestObjectStreamNeededToDecodeItself(t *testing.T) {
	r, _ := openTestPDF(t, testPDF(testObjStm{id: 2, ids: []int{3, 4}, objs: []string{"100", "(four)"}, length: "3 0 R"}))
	if _, err := lookUp(r, 4); err == nil || !strings.Contains(err.Error(), "needed to decode itself") {
		t.Fatalf("object 4 (in a stream whose /Length is in it): %v, want an error naming the stream", err)
	}
}
