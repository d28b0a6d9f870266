// Package rag holds the pure ingestion logic of retrieval-augmented generation: it
// turns a document into Markdown, the Markdown into paragraphs that know their
// heading path, and the paragraphs into chunks under a token budget.
//
// Nothing here does I/O, reads the clock or draws random numbers: the same bytes
// always give the same chunks, so an ingestion actor can re-run it on replay and an
// unchanged document can be recognised by its DocumentHash and skipped.
//
// # How data enters and leaves
//
//   - Convert takes a file name and its bytes and returns Markdown. It dispatches on
//     the extension, and sniffs the content when the extension is unknown:
//     Markdown as is; plain text with its paragraphs; HTML through
//     github.com/JohannesKaufmann/html-to-markdown/v2 with its table plugin; CSV and
//     XLSX (github.com/xuri/excelize/v2) as Markdown tables; DOCX read from its
//     word/document.xml with archive/zip and encoding/xml (headings, paragraphs,
//     tables); PDF text through internal/pdf (a copy of github.com/ledongthuc/pdf), a "# Page n" heading per
//     page (text only: no layout, no tables, no OCR of scanned pages); JSON pretty-printed in a fenced block;
//     source code in a fenced block with its language. Bad input is an error that
//     answers errors.Is with ErrUnsupported, ErrTooLarge or ErrMalformed; input is
//     bounded by MaxDocumentBytes, and what a zip (or a PDF's streams) may expand
//     to by MaxUnzippedBytes. Whatever the bytes, the work is bounded too: a table
//     is refused before a Markdown beyond MaxMarkdownBytes is written, HTML nesting
//     by MaxHTMLDepth and its tables by MaxHTMLTableCells, DOCX table nesting by
//     MaxTableDepth, a PDF's pages by MaxPDFPages, what its reader rereads by
//     MaxPDFOpenBytes and MaxPDFReadBytes (cycles in the file end there) and
//     what its object streams decode to by MaxPDFObjectStreamBytes.
//   - Split cuts Markdown into Paragraphs: blank lines separate them, a fenced code
//     block or a table stays whole, and headings (ATX and setext) are not
//     paragraphs but set the HeadingPath ("# A", "## B") of the paragraphs below
//     (a text of headings only has its headings as its paragraphs instead).
//     Start and End are byte offsets, and markdown[Start:End] is the paragraph.
//   - Pack packs whole paragraphs into Chunks of at most ChunkOptions.MaxTokens
//     tokens, counted by a Tokenizer (Cl100k, cl100k_base, by default: counted by
//     pipelines/bpe, as TiktokenCounter, with tiktoken's counts and no allocations).
//     Each chunk after the first starts with whole trailing paragraphs of the one
//     before, up to ChunkOptions.OverlapTokens. A paragraph longer than a chunk is
//     cut at sentence boundaries (at line boundaries for code and tables), then at
//     whitespace, and, for a run without whitespace, at character boundaries.
//     Pack pulls pieces as it packs, and with ChunkOptions.MaxChunks stops just
//     past a caller's limit.
//   - DocumentHash is the key that tells an unchanged document from a changed one;
//     Chunk.Hash the key of one chunk's text.
//
// A store keeps, per chunk, the source name, Chunk.HeadingPath and Chunk.Start and
// Chunk.End, which point into the Markdown that Convert returned.
package rag
