package a2a

import (
	"fmt"
	"strconv"
	"strings"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/internal/textclip"
)

// maxShownURI bounds the URI of a file that a file part's description shows.
const maxShownURI = 2048

// withoutFileBytes replaces each file part of ev (of its message, its task's
// artifacts, status and history, its update's artifact or status) by a text part
// that describes the file (fileDescription), keeping its metadata: the model reads the
// tool's answer as text, which never held a file's bytes, and the task the tool
// assembles holds no file, however large, while its stream runs. It returns ev.
func withoutFileBytes(ev sdk.Event) sdk.Event {
	msg := func(m *sdk.Message) {
		if m != nil {
			describeFiles(m.Parts)
		}
	}
	switch v := ev.(type) {
	case *sdk.Message:
		msg(v)
	case *sdk.Task:
		for _, a := range v.Artifacts {
			if a != nil {
				describeFiles(a.Parts)
			}
		}
		msg(v.Status.Message)
		for _, m := range v.History {
			msg(m)
		}
	case *sdk.TaskStatusUpdateEvent:
		msg(v.Status.Message)
	case *sdk.TaskArtifactUpdateEvent:
		if v.Artifact != nil {
			describeFiles(v.Artifact.Parts)
		}
	}
	return ev
}

// describeFiles replaces, in place, each file part of parts by a text part
// describing it.
func describeFiles(parts sdk.ContentParts) {
	for i, p := range parts {
		if f, ok := p.(sdk.FilePart); ok {
			parts[i] = sdk.TextPart{Text: fileDescription(f), Metadata: f.Metadata}
		}
	}
}

// fileDescription describes the file of a file part: its name, media type and size
// (decoded from its bytes' base64), or the URI it is at (a data: URI, or one of
// more than maxShownURI bytes, by its size alone), in brackets, on one line:
//
//	[file "report.pdf", application/pdf, 48213 bytes]
//	[file "chart.png", image/png, at https://example.com/chart.png]
//
// The name is quoted, and so is a media type or URI that holds more than one
// does (shownAs): what the remote agent chose cannot end the description early
// (a bracket, a newline) and pass for other text of the answer.
func fileDescription(f sdk.FilePart) string {
	var meta sdk.FileMeta
	what := ""
	switch c := f.File.(type) {
	case sdk.FileBytes:
		meta = c.FileMeta
		what = fmt.Sprintf("%d bytes", base64Size(c.Bytes))
	case sdk.FileURI:
		meta = c.FileMeta
		switch {
		case strings.HasPrefix(strings.ToLower(c.URI), "data:") || len(c.URI) > maxShownURI:
			what = fmt.Sprintf("given in a URI of %d bytes, not shown", len(c.URI))
		default:
			what = "at " + shownAs(c.URI, isURIByte)
		}
	default:
		what = "no content"
	}
	s := "[file"
	if meta.Name != "" {
		s += fmt.Sprintf(" %q,", textclip.Head(meta.Name, 200))
	}
	if meta.MimeType != "" {
		s += fmt.Sprintf(" %s,", shownAs(textclip.Head(meta.MimeType, 100), isMediaTypeByte))
	}
	return s + " " + what + "]"
}

// shownAs is s as a description shows it: bare when each of its bytes is one
// that plain reads (a media type's, a URI's), else quoted as a Go string, its
// control characters, quotes and non-ASCII escaped.
func shownAs(s string, plain func(byte) bool) string {
	for i := range len(s) {
		if !plain(s[i]) {
			return strconv.Quote(s)
		}
	}
	return s
}

// isURIByte says whether c is one a URI holds as RFC 3986 writes it: printable
// ASCII but a space, a quote, brackets and the characters it never holds bare.
func isURIByte(c byte) bool {
	return c > ' ' && c < 0x7f && !strings.ContainsRune(`"<>\^`+"`"+`{|}[]`, rune(c))
}

// isMediaTypeByte says whether c is one a media type holds (RFC 9110: tokens,
// "/", and parameters after "; " of token=token).
func isMediaTypeByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$&^_.+-/;= ", c) >= 0
}

// base64Size is the size of the bytes that the base64 s encodes (padded or not,
// either alphabet).
func base64Size(s string) int {
	s = strings.TrimRight(s, "=")
	return len(s) * 3 / 4
}
