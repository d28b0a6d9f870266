// Objects in object streams, each stream decoded once. This file is not in
// github.com/ledongthuc/pdf; see the package comment.

package pdf

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
)

// DefaultObjectStreamLimit is the most a Reader's decoded object streams may
// take in all, unless SetObjectStreamLimits says otherwise.
const DefaultObjectStreamLimit = 64 << 20

// ErrLimit is wrapped by the error a Reader panics with (and GetPlainText
// returns) once its object streams pass a limit of SetObjectStreamLimits.
var ErrLimit = errors.New("pdf: object streams beyond the reader's limit")

// SetObjectStreamLimits bounds what r spends on object streams. r decodes an
// object stream the first time it looks up an object in it, and keeps it
// decoded: decoded is the most bytes the decoded streams may take in all
// (counting an index of 16 bytes per object). parsed is the most bytes of
// objects r may parse from them in all, counting an object again each time it
// is looked up (r keeps no parsed objects). Past either limit a look-up panics
// with an error wrapping ErrLimit. By default decoded is
// DefaultObjectStreamLimit and parsed is unbounded.
func (r *Reader) SetObjectStreamLimits(decoded, parsed int64) {
	r.objStmLimit, r.parseLimit = decoded, parsed
}

// objStm is a decoded object stream.
type objStm struct {
	data    []byte
	first   int64         // where the first object begins in data (/First)
	index   []objStmEntry // sorted by id, the first entry of each id
	extends object        // the stream's /Extends (an objptr), or nil
}

// objStmEntry is an entry of an object stream's header: an object and its
// offset from the stream's first object.
type objStmEntry struct {
	id  uint32
	off int64
}

// objectInStream returns the object ptr found in the object stream strm, or in
// the streams strm extends.
func (r *Reader) objectInStream(ptr, strm objptr) object {
	var seen map[objptr]bool
	for {
		s := r.objectStream(strm)
		if i, ok := slices.BinarySearchFunc(s.index, ptr.id, func(e objStmEntry, id uint32) int { return cmp.Compare(e.id, id) }); ok {
			return r.parseInStream(s, ptr, s.index[i].off)
		}
		ext, ok := s.extends.(objptr)
		if !ok {
			panic("cannot find object in stream")
		}
		if seen == nil {
			seen = map[objptr]bool{strm: true}
		}
		if seen[ext] {
			panic(fmt.Errorf("malformed PDF: object stream %v extends itself (a cycle of /Extends)", ext))
		}
		seen[ext] = true
		strm = ext
	}
}

// objectStream returns the object stream ptr, decoding it the first time.
func (r *Reader) objectStream(ptr objptr) *objStm {
	if s, ok := r.objStms[ptr]; ok {
		if s == nil {
			panic(fmt.Errorf("malformed PDF: object stream %v is needed to decode itself (its /Length or /Filter is inside it)", ptr))
		}
		return s
	}
	if r.objStms == nil {
		r.objStms = map[objptr]*objStm{}
	}
	r.objStms[ptr] = nil // being decoded
	defer func() {
		if r.objStms[ptr] == nil {
			delete(r.objStms, ptr)
		}
	}()
	// A stream listed inside an object stream would be resolved through
	// objectStream again, and a cycle of them would recurse until the
	// goroutine's stack overflows, a fatal error.
	if ptr.id < uint32(len(r.xref)) && r.xref[ptr.id].inStream {
		panic(fmt.Errorf("malformed PDF: object stream %v is itself in an object stream", ptr))
	}
	strm := r.resolve(ptr, ptr)
	if strm.Kind() != Stream {
		panic("not a stream")
	}
	if strm.Key("Type").Name() != "ObjStm" {
		panic("not an object stream")
	}
	n := strm.Key("N").Int64()
	first := strm.Key("First").Int64()
	if first == 0 {
		panic("missing First")
	}
	tooLarge := func() {
		panic(fmt.Errorf("%w: object streams decode to more than %d bytes", ErrLimit, r.objStmLimit))
	}
	room := r.objStmLimit - r.objStmBytes
	rc := strm.Reader()
	// A stream that fails to decode part way keeps what decoded before: its
	// objects there were found when each look-up decoded the stream anew.
	data, _ := io.ReadAll(io.LimitReader(rc, max(room+1, 0)))
	rc.Close()
	if int64(len(data)) > room {
		tooLarge()
	}
	s := &objStm{data: data, first: first, extends: strm.data.(stream).hdr["Extends"]}
	b := newBufferBytes(data)
	for i := int64(0); i < n; i++ {
		tok := b.readToken()
		if tok == io.EOF {
			break
		}
		off, _ := b.readToken().(int64)
		id, ok := tok.(int64)
		if !ok || id < 0 || id > math.MaxUint32 {
			continue
		}
		if int64(len(data))+16*int64(len(s.index)+1) > room {
			tooLarge()
		}
		s.index = append(s.index, objStmEntry{uint32(id), off})
	}
	r.objStmBytes += int64(len(data)) + 16*int64(len(s.index))
	// Sorted stably, so the first entry of an id is kept, as when the header
	// was read from its start for each look-up.
	slices.SortStableFunc(s.index, func(a, b objStmEntry) int { return cmp.Compare(a.id, b.id) })
	s.index = slices.CompactFunc(s.index, func(a, b objStmEntry) bool { return a.id == b.id })
	r.objStms[ptr] = s
	return s
}

// parseInStream parses object ptr at offset off from the first object of s.
func (r *Reader) parseInStream(s *objStm, ptr objptr, off int64) object {
	pos := s.first + off
	if pos < 0 || pos >= int64(len(s.data)) {
		panic(fmt.Errorf("malformed PDF: object %v at offset %d of a %d-byte object stream", ptr, pos, len(s.data)))
	}
	b := newBufferBytes(s.data[pos:])
	obj := b.readObject()
	r.parsed += b.readOffset()
	if r.parsed > r.parseLimit {
		panic(fmt.Errorf("%w: parsed more than %d bytes of objects from object streams", ErrLimit, r.parseLimit))
	}
	return obj
}
