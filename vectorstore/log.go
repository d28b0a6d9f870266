package vectorstore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math"
	"slices"
)

// The log file of an Embedded store.
//
// The file starts with an 8-byte magic ("TRVSLOG" and a version byte), then holds
// records back to back. A record is a 12-byte header and a payload:
//
//	offset 0  uint32 LE  payload length
//	offset 4  uint32 LE  CRC-32C of bytes 0..3 (the length is trustworthy on its own)
//	offset 8  uint32 LE  CRC-32C of the payload
//	offset 12 payload    one Upsert batch or one Delete batch
//
// A payload is an op byte and the collection name, then for an upsert the dimension,
// the item count and the items (ID, dim little-endian float32s, metadata pairs sorted
// by key, text), and for a delete the ID count and the IDs. Strings and counts are
// uvarint-length-prefixed. One call is one record, so a batch is atomic on disk too.

const (
	logMagic      = "TRVSLOG\x01"
	headerSize    = 12
	maxRecordSize = 1 << 30 // a larger batch must be split by the caller

	opUpsert byte = 1
	opDelete byte = 2

	// compactChunk bounds the payload of one record written by compaction.
	compactChunk = 4 << 20
)

// castagnoli is the CRC-32C table; it is computed once and never written again.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// frame returns header+payload, ready to append.
func frame(payload []byte) []byte {
	buf := make([]byte, headerSize+len(payload))
	binary.LittleEndian.PutUint32(buf[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(buf[4:8], crc32.Checksum(buf[0:4], castagnoli))
	binary.LittleEndian.PutUint32(buf[8:12], crc32.Checksum(payload, castagnoli))
	copy(buf[headerSize:], payload)
	return buf
}

// header is a decoded record header.
type header struct {
	length     uint32
	payloadCRC uint32
}

// parseHeader decodes a header and reports whether its own checksum holds.
func parseHeader(b []byte) (header, bool) {
	length := binary.LittleEndian.Uint32(b[0:4])
	if crc32.Checksum(b[0:4], castagnoli) != binary.LittleEndian.Uint32(b[4:8]) || length > maxRecordSize {
		return header{}, false
	}
	return header{length: length, payloadCRC: binary.LittleEndian.Uint32(b[8:12])}, true
}

// record is a decoded payload.
type record struct {
	op         byte
	collection string
	dim        int      // upsert
	items      []Item   // upsert
	ids        []string // delete
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func encodeUpsert(b []byte, collection string, dim int, items []Item) []byte {
	b = append(b, opUpsert)
	b = appendString(b, collection)
	b = binary.AppendUvarint(b, uint64(dim))
	b = binary.AppendUvarint(b, uint64(len(items)))
	for _, it := range items {
		b = appendString(b, it.ID)
		for _, x := range it.Vector {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
		b = binary.AppendUvarint(b, uint64(len(it.Metadata)))
		for _, k := range slices.Sorted(maps.Keys(it.Metadata)) {
			b = appendString(b, k)
			b = appendString(b, it.Metadata[k])
		}
		b = appendString(b, it.Text)
	}
	return b
}

func encodeDelete(collection string, ids []string) []byte {
	b := []byte{opDelete}
	b = appendString(b, collection)
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = appendString(b, id)
	}
	return b
}

// itemSize estimates an item's encoded size; compaction compares the log's size with
// the sum over live items.
func itemSize(it Item) int {
	n := 4 + len(it.ID) + 4*len(it.Vector) + len(it.Text)
	for k, v := range it.Metadata {
		n += 2 + len(k) + len(v)
	}
	return n
}

// decoder reads a payload; the first error sticks and later reads return zero values.
type decoder struct {
	b   []byte
	err error
}

var errTruncatedPayload = errors.New("payload ends early")

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errTruncatedPayload
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) take(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errTruncatedPayload
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) str() string { return string(d.take(d.uvarint())) }

// count reads a count and checks that at least min bytes per element remain, so a
// corrupt count cannot make the decoder allocate without bound.
func (d *decoder) count(minBytes uint64) int {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b))/max(minBytes, 1) {
		d.err = errTruncatedPayload
		return 0
	}
	return int(n)
}

func decodeRecord(p []byte) (record, error) {
	d := &decoder{b: p}
	var r record
	op := d.take(1)
	if d.err != nil {
		return r, d.err
	}
	r.op = op[0]
	r.collection = d.str()
	switch r.op {
	case opUpsert:
		dim := d.uvarint()
		if d.err == nil && (dim == 0 || dim > maxRecordSize/4) {
			return r, fmt.Errorf("bad dimension %d", dim)
		}
		r.dim = int(dim)
		n := d.count(1 + 4*dim + 2)
		r.items = make([]Item, 0, n)
		for range n {
			it := Item{ID: d.str()}
			raw := d.take(4 * dim)
			if d.err != nil {
				break
			}
			it.Vector = make([]float32, dim)
			for i := range it.Vector {
				it.Vector[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			if m := d.count(2); m > 0 {
				it.Metadata = make(map[string]string, m)
				for range m {
					k := d.str()
					it.Metadata[k] = d.str()
				}
			}
			it.Text = d.str()
			r.items = append(r.items, it)
		}
	case opDelete:
		n := d.count(1)
		r.ids = make([]string, 0, n)
		for range n {
			r.ids = append(r.ids, d.str())
		}
	default:
		return r, fmt.Errorf("unknown op %d", r.op)
	}
	if d.err != nil {
		return r, d.err
	}
	if len(d.b) != 0 {
		return r, fmt.Errorf("%d unexpected bytes after the payload", len(d.b))
	}
	return r, nil
}

// scanResult says where the valid records of a log end.
type scanResult struct {
	end  int64 // offset just past the last valid record
	torn bool  // bytes after end are a torn (incomplete or garbled) last record
}

// scanLog reads the records of a log of the given size, starting after the magic,
// and calls fn with each valid payload (the slice is reused: fn must copy).
//
// A record that fails its checks is a torn tail when no valid record follows it: the
// last append was cut short by a crash. Then scanLog reports torn and the caller
// truncates. A bad record followed by a valid one is corruption in the middle of the
// log; scanLog returns ErrCorrupt and the caller changes nothing.
func scanLog(r io.ReaderAt, size int64, fn func(off int64, payload []byte) error) (scanResult, error) {
	br := bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 1<<20)
	if _, err := br.Discard(len(logMagic)); err != nil {
		return scanResult{}, err
	}
	off := int64(len(logMagic))
	var hdrBuf [headerSize]byte
	var payload []byte
	for off < size {
		if size-off < headerSize {
			return scanResult{end: off, torn: true}, nil
		}
		if _, err := io.ReadFull(br, hdrBuf[:]); err != nil {
			return scanResult{}, err
		}
		h, ok := parseHeader(hdrBuf[:])
		if !ok {
			return badRecord(r, size, off, off+1, "bad header checksum")
		}
		end := off + headerSize + int64(h.length)
		if end > size {
			// The length is trustworthy (its checksum held): the payload was cut off.
			return scanResult{end: off, torn: true}, nil
		}
		if cap(payload) < int(h.length) {
			payload = make([]byte, h.length)
		}
		payload = payload[:h.length]
		if _, err := io.ReadFull(br, payload); err != nil {
			return scanResult{}, err
		}
		if crc32.Checksum(payload, castagnoli) != h.payloadCRC {
			return badRecord(r, size, off, end, "bad payload checksum")
		}
		if err := fn(off, payload); err != nil {
			return scanResult{}, err
		}
		off = end
	}
	return scanResult{end: off}, nil
}

// badRecord decides between a torn tail and corruption for a bad record at off, by
// looking for a valid record at or after from.
func badRecord(r io.ReaderAt, size, off, from int64, reason string) (scanResult, error) {
	next, found, err := findValidRecord(r, from, size)
	if err != nil {
		return scanResult{}, err
	}
	if found {
		return scanResult{}, fmt.Errorf("%w: record at offset %d: %s, and a valid record follows at offset %d", ErrCorrupt, off, reason, next)
	}
	return scanResult{end: off, torn: true}, nil
}

// findValidRecord scans [from, size) byte by byte for a record whose header and
// payload checksums both hold.
func findValidRecord(r io.ReaderAt, from, size int64) (int64, bool, error) {
	const window = 1 << 20
	buf := make([]byte, window+headerSize)
	var payload []byte
	for base := from; base+headerSize <= size; base += window {
		n := int(min(int64(len(buf)), size-base))
		if _, err := r.ReadAt(buf[:n], base); err != nil && !errors.Is(err, io.EOF) {
			return 0, false, err
		}
		for i := 0; i < window && i+headerSize <= n; i++ {
			h, ok := parseHeader(buf[i : i+headerSize])
			pos := base + int64(i)
			if !ok || pos+headerSize+int64(h.length) > size {
				continue
			}
			if cap(payload) < int(h.length) {
				payload = make([]byte, h.length)
			}
			payload = payload[:h.length]
			if _, err := r.ReadAt(payload, pos+headerSize); err != nil && !errors.Is(err, io.EOF) {
				return 0, false, err
			}
			if crc32.Checksum(payload, castagnoli) == h.payloadCRC && len(payload) > 0 {
				return pos, true, nil
			}
		}
	}
	return 0, false, nil
}
