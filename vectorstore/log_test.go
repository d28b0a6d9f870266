package vectorstore

import (
	"bytes"
	"slices"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	items := []Item{
		{ID: "a", Vector: []float32{1, -2.5, 3e-40}, Metadata: map[string]string{"z": "1", "a": ""}, Text: "hello"},
		{ID: "ünï", Vector: []float32{0, 0, 1}},
	}
	r, err := decodeRecord(encodeUpsert(nil, "coll", 3, items))
	if err != nil {
		t.Fatal(err)
	}
	if r.op != opUpsert || r.collection != "coll" || r.dim != 3 || len(r.items) != 2 {
		t.Fatalf("decoded %+v", r)
	}
	for i := range items {
		if r.items[i].ID != items[i].ID || !slices.Equal(r.items[i].Vector, items[i].Vector) ||
			r.items[i].Text != items[i].Text || len(r.items[i].Metadata) != len(items[i].Metadata) {
			t.Errorf("item %d: %+v, want %+v", i, r.items[i], items[i])
		}
	}
	// Metadata is written in key order: the same item always encodes the same way.
	if !bytes.Equal(encodeUpsert(nil, "c", 3, items[:1]), encodeUpsert(nil, "c", 3, items[:1])) {
		t.Error("encoding is not deterministic")
	}
	r, err = decodeRecord(encodeDelete("coll", []string{"a", "b"}))
	if err != nil || r.op != opDelete || !slices.Equal(r.ids, []string{"a", "b"}) {
		t.Errorf("delete record: %+v, %v", r, err)
	}
}

// FuzzDecodeRecord: a payload whose checksum held but whose content is bad (a bug, a
// future format) must give an error, never a panic or an unbounded allocation.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeUpsert(nil, "c", 2, []Item{{ID: "a", Vector: []float32{1, 2}, Metadata: map[string]string{"k": "v"}, Text: "t"}}))
	f.Add(encodeUpsert(nil, "c", 2, nil))
	f.Add(encodeDelete("c", []string{"a", "b"}))
	f.Add([]byte{opUpsert, 1, 'c', 0xff, 0xff, 0xff, 0xff, 0x0f, 1})
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := decodeRecord(p)
		if err != nil {
			return
		}
		// What decodes re-encodes canonically: encode(decode(encode(r))) == encode(r).
		encode := func(r record) []byte {
			if r.op == opUpsert {
				return encodeUpsert(nil, r.collection, r.dim, r.items)
			}
			return encodeDelete(r.collection, r.ids)
		}
		again := encode(r)
		r2, err := decodeRecord(again)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !bytes.Equal(encode(r2), again) {
			t.Errorf("encoding is not stable for %+v", r)
		}
	})
}
