package messages

import (
	"encoding/json"
	"errors"
	"maps"
	"testing"
)

// The parts of a document's chunk set split across events are of
// kb.document_ingested version 2, a whole chunk set of version 1. A build that
// reads version 1 only (from before the parts: its table says 1) refuses a part
// with ErrFutureVersion, where it decoded it as the whole document (the part
// fields unknown to it) and its fold kept the last part's chunks, its sync
// deleted the others' vectors and its compaction the other parts; it still reads
// a document that is not split. This build reads both, and refuses version 3.
func TestSplitDocumentPartsAreOfVersion2(t *testing.T) {
	doc := func(part, parts int) *KBDocumentIngested {
		return &KBDocumentIngested{Reason: "new document", Source: "big.md", Hash: "h", Embedder: "hashing", Format: "markdown",
			Conversion: 1, Part: part, Parts: parts, Chunks: []KBChunk{{ChunkID: "c_1", Text: "text", Tokens: 1}}}
	}
	stamp := func(p Payload) Envelope {
		t.Helper()
		e, err := NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = "kb-1", "kb/docs", 4, 1, "knowledge"
		return e
	}
	older := maps.Clone(versions)
	older[TypeKBDocumentIngested] = 1

	for _, c := range []struct {
		name    string
		p       *KBDocumentIngested
		version int
	}{
		{"whole", doc(0, 0), 1},
		{"part 1 of 2", doc(1, 2), 2},
		{"part 2 of 2", doc(2, 2), 2},
	} {
		e := stamp(c.p)
		if e.Version != c.version {
			t.Errorf("%s: written as version %d; want %d", c.name, e.Version, c.version)
		}
		got, err := e.Decode()
		if err != nil {
			t.Fatalf("%s: this build cannot read it: %v", c.name, err)
		}
		if in := got.(*KBDocumentIngested); in.Part != c.p.Part || in.Parts != c.p.Parts || len(in.Chunks) != 1 {
			t.Errorf("%s: decoded as %+v", c.name, in)
		}
		_, err = e.decode(older)
		if refused := errors.Is(err, ErrFutureVersion); refused != (c.version > 1) {
			t.Errorf("%s: a build reading version 1 only decodes it with error %v; want it refused: %v", c.name, err, c.version > 1)
		}
	}

	// Through the wire encoding, and a version this build does not know.
	b, err := Marshal(stamp(doc(1, 3)))
	if err != nil {
		t.Fatal(err)
	}
	e, err := Unmarshal(b)
	if err != nil || e.Version != 2 {
		t.Fatalf("Unmarshal = version %d, %v; want version 2", e.Version, err)
	}
	if _, err := e.Decode(); err != nil {
		t.Fatalf("version 2 read back: %v", err)
	}
	e.Version = 3
	if _, err := e.Decode(); !errors.Is(err, ErrFutureVersion) {
		t.Fatalf("version 3 decoded with error %v; want ErrFutureVersion", err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil || raw["v"] != float64(2) {
		t.Fatalf("the envelope's JSON says v %v (%v); want 2", raw["v"], err)
	}
}
