package node

import (
	"golang.org/x/text/unicode/norm"

	"github.com/troupe-run/troupe/pipelines/rag"
)

// An Idempotency-Key of the writes of /v1/kb (POST /v1/kb/{name}/documents,
// DELETE /v1/kb/{name}/documents/{source}) names one request, as one of POST
// /v1/memories does (memorykeys.go): sent again with the same request it gets the
// first answer; sent with another request (another knowledge base, document,
// body or route) it is refused, 422, and nothing is written. A knowledge base
// keeps, beside each key in its events, the document and the hash of the bytes
// the key wrote (knowledge.ErrKeyReused), also for a write that changed nothing
// (the document was stored already: the key's mark, messages.KBKeyPart, unless
// the node is pinned to decision rules whose builds cannot fold it), which holds
// across restarts and nodes; a knowledge base the key never wrote to cannot
// tell: the node remembers, besides, the digest of the request each recent key
// came with (Node.kbKeys), for requestKeyTTL.

// kbClientKeyPrefix begins the knowledge base's key of a client's
// Idempotency-Key: a write under it that changed nothing (the document was
// stored already) records a key's mark (knowledge.Config.KeepsRequest), so that
// the base keeps the key's request too.
const kbClientKeyPrefix = "http/"

// kbRequest is what a write of /v1/kb asks, in one form of those that ask it
// (its digest: kbRequestDigest): the document's name in Unicode NFC (the
// knowledge base's form of it), how its bytes are read (rag.Format of the
// upload's file name, or kbTextFormat for JSON content) and their hash.
type kbRequest struct {
	Op     string `json:"op"` // "add" or "remove"
	Base   string `json:"base"`
	Source string `json:"source"`
	Format string `json:"format,omitempty"`
	Hash   string `json:"hash,omitempty"`
}

// kbTextFormat is the format of a JSON document's content in a kbRequest: it is
// stored as Markdown, whatever its name.
const kbTextFormat = "text/markdown"

// kbAddDigest is the digest of a request to add doc to knowledge base name.
func kbAddDigest(name string, doc kbAddArgs) string {
	format := kbTextFormat
	if !doc.Text {
		file := doc.File
		if file == "" {
			file = doc.Source
		}
		format = rag.Format(doc.Source, file, doc.Body)
	}
	return requestDigest(kbRequest{Op: "add", Base: name, Source: norm.NFC.String(doc.Source), Format: format, Hash: rag.DocumentHash(doc.Body)})
}

// kbRemoveDigest is the digest of a request to remove source from knowledge
// base name.
func kbRemoveDigest(name, source string) string {
	return requestDigest(kbRequest{Op: "remove", Base: name, Source: norm.NFC.String(source)})
}
