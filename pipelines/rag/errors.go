package rag

import "errors"

// Errors Convert answers with. Each returned error wraps one of them (test with
// errors.Is) and says which file and why.
var (
	// ErrUnsupported is a format Convert cannot read: an unknown binary file, or a
	// format no maintained library reads.
	ErrUnsupported = errors.New("unsupported format")
	// ErrTooLarge is input beyond MaxDocumentBytes, a zip (or a PDF's streams)
	// that expands beyond MaxUnzippedBytes, Markdown beyond MaxMarkdownBytes (a
	// table is refused before it is written), HTML nested deeper than
	// MaxHTMLDepth, an HTML table of more than MaxHTMLTableCells cells, DOCX tables nested deeper than MaxTableDepth, a PDF of more
	// than MaxPDFPages pages, or one the reader reads beyond
	// MaxPDFOpenBytes or MaxPDFReadBytes, or whose object streams decode beyond
	// MaxPDFObjectStreamBytes.
	ErrTooLarge = errors.New("document too large")
	// ErrMalformed is input that does not parse as the format it claims: a corrupt
	// zip, invalid UTF-8 in a text format, invalid JSON or CSV.
	ErrMalformed = errors.New("malformed document")
)

// Bounds on the work Convert does, whatever the input.
const (
	// MaxDocumentBytes is the largest document Convert accepts.
	MaxDocumentBytes = 32 << 20
	// MaxUnzippedBytes is how much a DOCX or XLSX may expand to when unzipped.
	MaxUnzippedBytes = 256 << 20
	// MaxMarkdownBytes is the largest Markdown Convert returns; a document that
	// would give more (a spreadsheet with millions of cells) is refused.
	MaxMarkdownBytes = 64 << 20
	// MaxHeadingBytes is the longest heading title Split takes for a heading; a
	// longer one (a page in an <h1>, a long paragraph over a "---" line) is a
	// paragraph, since a heading's title is in the heading path of every chunk
	// below it, outside the chunk's token budget.
	MaxHeadingBytes = 512
	// MaxHTMLDepth is the deepest element nesting Convert accepts in HTML; deeper
	// documents are refused rather than recursed into.
	MaxHTMLDepth = 512
	// MaxHTMLTableCells is the most cells Convert accepts in one HTML table, rows
	// times its widest row, and the most cells its colspan and rowspan attributes
	// may add.
	MaxHTMLTableCells = 1 << 20
	// MaxTableDepth is the deepest nesting of tables inside table cells Convert
	// accepts in a DOCX.
	MaxTableDepth = 64
	// MaxPDFPages is the most pages Convert reads from a PDF, and MaxPDFTreeNodes
	// the most nodes of its page tree it visits; a PDF with more is refused.
	MaxPDFPages     = 10000
	MaxPDFTreeNodes = 4 * MaxPDFPages
	// MaxPDFOpenBytes, plus 64 times the file's size, is the most the PDF reader
	// may read from a file to open it, and MaxPDFReadBytes, plus 64 times its
	// size, the most to read its pages (it rereads objects as it resolves them).
	MaxPDFOpenBytes = 16 << 20
	MaxPDFReadBytes = 256 << 20
	// MaxPDFObjectStreamBytes is the most the PDF reader's decoded object
	// streams may take in all (it decodes each once and keeps it); a PDF whose
	// object streams decode to more is refused.
	MaxPDFObjectStreamBytes = 64 << 20
)
